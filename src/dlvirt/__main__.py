from dlvirt.cli import main

raise SystemExit(main())
