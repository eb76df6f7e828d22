"""The numeric engine under the model: the CPU's model and features (``cpu.py``), threads and the OpenBLAS kernel
(``threads.py``), the GEMM's precision policy and dispatch (``gemm.py``: fp32 on oneDNN or OpenBLAS, bf16, int8),
the oneDNN binding (``onednn.py``), the fused element-wise numba kernels (``kernels.py``), the int8 scheme
(``quant.py``) and bf16 bit patterns (``bf16.py``). Nothing here imports models, files or runs (``gemm.prepare``
and ``quant.py`` read the fields of the weights they are handed by name)."""
