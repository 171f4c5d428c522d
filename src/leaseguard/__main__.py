from leaseguard.cli import main

raise SystemExit(main())
