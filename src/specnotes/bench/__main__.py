from specnotes.bench import main

raise SystemExit(main())
