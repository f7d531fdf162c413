"""GPU paths: a Triton flash-attention kernel and FlexAttention-based masked attention.

Everything here imports without a GPU; kernels run on CUDA, or on the CPU under Triton's
interpreter (``TRITON_INTERPRET=1``) for testing."""
