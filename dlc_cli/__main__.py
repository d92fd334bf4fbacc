import sys

from dlc_cli.main import main

sys.exit(main())
