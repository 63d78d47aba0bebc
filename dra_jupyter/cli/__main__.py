"""``python -m dra_jupyter.cli``: the ``dra-jupyter`` command."""

from dra_jupyter.cli.main import main

raise SystemExit(main())
