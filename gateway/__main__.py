"""``python -m gateway`` = the ``remoteops-gateway`` command."""

from gateway._launch import main

raise SystemExit(main())
