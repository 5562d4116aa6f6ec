"""Tensor parallelism over torch.distributed (gloo on CPU, NCCL on CUDA): the Llama target split
Megatron-style across N ranks, each loading only its own slices; the draft head replicated."""
