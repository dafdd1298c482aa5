import sys

from pyrofling.cli import main

sys.exit(main())
