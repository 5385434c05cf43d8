import sys

from kafkatier.cli.main import main

sys.exit(main())
