"""`python -m gateway` runs the `mendpoint` command."""

import sys

from gateway.cli import main

sys.exit(main())
