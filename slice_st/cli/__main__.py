"""``python -m slice_st.cli``: the same as the ``slice-st`` command."""

import sys

from slice_st.cli import main

sys.exit(main())
