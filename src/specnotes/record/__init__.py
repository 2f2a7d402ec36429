"""The published record: measurements with their provenance (``published``, data/published/*.json) and the
cost model's engine knobs fitted to them and judged out of sample (``calibrate``, data/calibrations.json).
No torch; imports ``analytic`` and ``validate``."""
