"""Engine side of the core: the engine contract, its traits, process groups, watching, hardware and telemetry."""
