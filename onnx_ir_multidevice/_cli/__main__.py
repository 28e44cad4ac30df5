"""``python -m onnx_ir_multidevice._cli``: the ``omny`` command line."""

import sys

from onnx_ir_multidevice._cli import main

sys.exit(main())
