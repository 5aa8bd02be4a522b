"""Where a run's settings come from: the generated parsers, the layers of one Options, presets, input checks."""
