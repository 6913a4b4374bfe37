"""The engine-independent core: hooks, config, runner, store and reports."""
