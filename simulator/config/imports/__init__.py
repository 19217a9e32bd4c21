"""Readers of foreign launch configurations (issue 27): Megatron-LM / Megatron-Core argument
lists and launch scripts (`megatron`), into scenario mappings."""
