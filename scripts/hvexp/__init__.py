"""hv-storvsc's experiment runner: spec files in, boots, figures, a report, a verdict.

    python3 -m hvexp run SPEC [OPTIONS]       (./hvstor run)
    python3 -m hvexp report RESULTS [--spec]  (./hvstor report)

with scripts/ on PYTHONPATH. docs/experiments.md describes specs and results.
"""
