#!/bin/bash
# Megatron-LM launch of the published run scenarios/validation/r005-narayanan2021-t1-gpt-39.1b-512g.yaml, as its
# header states it (`shardsim import megatron NAME`; tests/test_import_megatron_roundtrip.py).
# source: Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM (arXiv:2104.04473)
# Table 1 (weak scaling); also NVIDIA/Megatron-LM images/cases_april2021.png @50a4b5fa
# Megatron-LM of 2021 (v2.x): fp16, --checkpoint-activations (the paper's Eq. 3 counts
# the recompute pass; the header's assumption), the local DDP (gradients reduced after
# the backward), micro-batch 1 (the header's assumption); vocabulary 51,200 and
# sequence 2048 as the header states (given as --vocab-size).

GPUS_PER_NODE=8
NNODES=64
DISTRIBUTED_ARGS="--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES --node_rank 0 --master_addr localhost --master_port 6000"

python -m torch.distributed.launch $DISTRIBUTED_ARGS \
       pretrain_gpt.py \
       --tensor-model-parallel-size 8 \
       --pipeline-model-parallel-size 2 \
       --num-layers-per-virtual-pipeline-stage 12 \
       --num-layers 48 \
       --hidden-size 8192 \
       --num-attention-heads 64 \
       --seq-length 2048 \
       --max-position-embeddings 2048 \
       --vocab-size 51200 \
       --micro-batch-size 1 \
       --global-batch-size 1536 \
       --checkpoint-activations \
       --fp16 \
       --DDP-impl local \
       --data-path my-gpt_text_sentence \
       --vocab-file gpt2-vocab.json \
       --merge-file gpt2-merges.txt \
       --log-interval 1
