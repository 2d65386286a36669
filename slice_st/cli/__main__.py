"""``python -m slice_st.cli``: the same as the ``slice-st`` command."""

from slice_st.cli import main

raise SystemExit(main())
