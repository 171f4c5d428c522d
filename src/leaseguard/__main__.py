import sys

from leaseguard.cli import main

sys.exit(main())
