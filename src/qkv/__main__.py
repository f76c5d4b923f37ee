"""`python -m qkv ...` runs the command line (also under torchrun: `torchrun ... -m qkv train ...`)."""

import sys

from .apps.cli import main

sys.exit(main())
