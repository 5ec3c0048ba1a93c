"""`python -m fuserlite.cli` is the `fuserlite` command."""

import sys

from fuserlite.cli import main

sys.exit(main())
