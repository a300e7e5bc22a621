"""`python -m graft.cli ...`, as the `graft` command."""

import sys

from graft.cli import main

sys.exit(main())
