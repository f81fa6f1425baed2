"""Fine-tuning a tiny ``transformers`` BERT for sequence classification under
bfloat16 autocast, on ``cpu`` or ``lazy`` (the loop of transformers' and
PyTorch's fine-tuning tutorials: AdamW, a linear warm-up then decay).

Run: python examples/finetune_autocast.py --device lazy [--steps 60] [--no-autocast]

Nothing is downloaded: the model is built from a small ``BertConfig`` (random
weights) and the task is synthetic: each sequence's tokens are drawn mostly
from one half of the vocabulary, and the label says which half.

Mixed precision: ``torch.autocast("lazy")`` does not exist (PyTorch's list of
autocast devices is C++), so on the lazy device the region is
``lm.autocast("lazy", dtype=torch.bfloat16)``, which applies eager CPU
autocast's op policy to lazy tensors (matmuls and linears in bfloat16, losses
and softmax-style reductions in float32); on ``cpu`` it is
``torch.autocast("cpu", dtype=torch.bfloat16)``. As usual with autocast, only
the forward pass and the loss are inside the region; the backward pass and
the optimizer step are outside it, and the weights stay float32.
"""
from __future__ import annotations

import argparse
import time

import torch

import lazy_mlir as lm


def synthetic_task(n, seq_len, vocab_size, seed):
    """(input_ids, attention_mask, labels): label c draws 80% of its tokens
    from half c of the vocabulary (ids from 1; 0 is padding), the rest anywhere;
    each sequence has a random length, padded to seq_len."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (n,), generator=g)
    half = (vocab_size - 1) // 2
    own = torch.randint(0, half, (n, seq_len), generator=g) + 1 + labels[:, None] * half
    anywhere = torch.randint(1, vocab_size, (n, seq_len), generator=g)
    ids = torch.where(torch.rand(n, seq_len, generator=g) < 0.8, own, anywhere)
    lengths = torch.randint(seq_len // 2, seq_len + 1, (n,), generator=g)
    attention_mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()
    return ids * attention_mask, attention_mask, labels


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Tiny BERT fine-tuning under bf16 autocast")
    parser.add_argument("--device", choices=("cpu", "lazy"), default="lazy")
    parser.add_argument("--steps", type=int, default=60, help="training steps")
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--max-grad-norm", type=float, default=1.0)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=512)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--no-autocast", action="store_true", help="train in float32")
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--eval-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from transformers import BertConfig, BertForSequenceClassification
    from transformers import get_linear_schedule_with_warmup

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    config = BertConfig(
        vocab_size=args.vocab_size, hidden_size=args.hidden_size,
        num_hidden_layers=args.layers, num_attention_heads=4,
        intermediate_size=4 * args.hidden_size, max_position_embeddings=args.seq_len,
        hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout,
        num_labels=2,
    )
    model = BertForSequenceClassification(config).to(device)

    train_ids, train_mask, train_labels = synthetic_task(
        args.steps * args.batch_size, args.seq_len, args.vocab_size, args.seed)
    eval_ids, eval_mask, eval_labels = synthetic_task(
        args.eval_size, args.seq_len, args.vocab_size, args.seed + 1)

    # no weight decay for biases and LayerNorm weights, as transformers' Trainer
    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not any(d in n for d in no_decay)],
         "weight_decay": args.weight_decay},
        {"params": [p for n, p in model.named_parameters() if any(d in n for d in no_decay)],
         "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=args.lr)
    scheduler = get_linear_schedule_with_warmup(optimizer, args.warmup_steps, args.steps)

    def autocast():
        # torch.autocast("lazy") is not a PyTorch autocast device: lm.autocast is.
        ac = lm.autocast if args.device == "lazy" else torch.autocast
        return ac(args.device, dtype=torch.bfloat16, enabled=not args.no_autocast)

    model.train()
    start = time.time()
    running = 0.0
    for step in range(args.steps):
        batch = slice(step * args.batch_size, (step + 1) * args.batch_size)
        input_ids = train_ids[batch].to(device)
        attention_mask = train_mask[batch].to(device)
        labels = train_labels[batch].to(device)
        with autocast():
            outputs = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
            loss = outputs.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if args.device == "lazy":
            lm.mark_step()
        running += loss.item()
        if (step + 1) % args.log_interval == 0 or step + 1 == args.steps:
            n = step % args.log_interval + 1
            print(f"step {step + 1:4d}/{args.steps} | lr {scheduler.get_last_lr()[0]:.3e} | "
                  f"loss {running / n:.6f} | {(time.time() - start) * 1000 / n:7.1f} ms/step",
                  flush=True)
            running, start = 0.0, time.time()

    model.eval()
    correct, total_loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, args.eval_size, 64):
            sl = slice(i, i + 64)
            with autocast():
                out = model(input_ids=eval_ids[sl].to(device),
                            attention_mask=eval_mask[sl].to(device),
                            labels=eval_labels[sl].to(device))
            total_loss += out.loss.item() * eval_labels[sl].numel()
            correct += (out.logits.argmax(-1).cpu() == eval_labels[sl]).sum().item()
    print(f"eval: loss {total_loss / args.eval_size:.6f} accuracy {correct / args.eval_size:.4f} "
          f"(autocast {'off' if args.no_autocast else 'bfloat16'}, device {args.device})")
    return correct / args.eval_size


if __name__ == "__main__":
    main()
