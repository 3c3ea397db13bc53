"""`python -m wt_otel.cli`: the same as the `wt-otel` console script."""

from wt_otel.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
