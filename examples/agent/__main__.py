"""`python -m examples.agent [--host H] [--port P]` (from the repository root): serve the reference agent."""

import sys

from .server import main

sys.exit(main())
