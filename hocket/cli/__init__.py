"""Command-line interface: one module per subcommand (see main.py)."""
