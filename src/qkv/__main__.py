"""`python -m qkv ...` runs the command line (under torchrun too: `torchrun ... -m qkv train`)."""

import sys

from .apps.cli import main

sys.exit(main())
