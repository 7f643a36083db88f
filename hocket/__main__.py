"""``python -m hocket ...``: the ``hocket`` command without its console script installed."""

from hocket.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
