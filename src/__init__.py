"""infermatrix: benchmark LLM inference engines and compare them side by side."""

__version__ = "0.1.0"

__all__ = ["__version__"]
