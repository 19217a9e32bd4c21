#!/bin/bash
# Megatron-LM launch of the published run scenarios/validation/r023-megatron-readme-table-gpt-1.7b-48g.yaml, as its
# header states it (`shardsim import megatron NAME`; tests/test_import_megatron_roundtrip.py).
# source: NVIDIA/Megatron-LM README.md 'Training Speed and Scalability' + images/model_table.png (commit f2e5db40, 2024-07, Megatron-Core r0.8.0)
# images/model_table.png (weak scaling table)
# Megatron-Core r0.8: bf16 (the header's assumption), the README's
# --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap (which needs
# --sequence-parallel and the distributed optimizer), micro-batch 1 and no recompute
# (the header's assumptions); the tokenizer is not stated: its size as --vocab-size.

DISTRIBUTED_ARGS=(
    --nproc_per_node 8
    --nnodes 6
)
GPT_MODEL_ARGS=(
    --num-layers 24
    --hidden-size 2048
    --num-attention-heads 16
    --seq-length 4096
    --max-position-embeddings 4096
    --vocab-size 131072
)
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 192
    --bf16
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
    --lr 6.0e-5
    --train-iters 500000
)
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 1
    --sequence-parallel
    --tp-comm-overlap
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${GPT_MODEL_ARGS[@]} ${TRAINING_ARGS[@]} ${MODEL_PARALLEL_ARGS[@]}
