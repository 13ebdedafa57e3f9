"""``python -m workers`` runs the ``memledger`` CLI."""

from workers.cli import main

main()
