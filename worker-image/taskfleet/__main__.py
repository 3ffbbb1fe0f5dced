"""``python -m taskfleet``: the same as the ``taskfleet`` command."""

from taskfleet.cli import main

main()
