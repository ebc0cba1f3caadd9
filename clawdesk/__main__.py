"""``python -m clawdesk`` — same as the ``clawdesk`` command."""

import sys

from clawdesk.cli import main

sys.exit(main())
