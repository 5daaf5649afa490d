"""``python -m gateway`` = the ``remoteops-gateway`` command."""

from gateway.cli import main

raise SystemExit(main())
