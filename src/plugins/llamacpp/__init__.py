"""The built-in ``llamacpp`` engine: llama.cpp's ``llama-server``."""
