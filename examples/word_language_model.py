"""PyTorch's word-level language model example (pytorch/examples,
word_language_model/main.py + model.py + data.py) on ``cpu`` or ``lazy``.

Run: python examples/word_language_model.py --device lazy [--model LSTM|Transformer]
     [--epochs 2] [--steps N] [--dry-run]

What differs from PyTorch's example, and why:

- Nothing is downloaded: the corpus is the docstrings of a few standard-library
  modules (the same words on every run of one Python installation), split
  80/10/10 into train / valid / test, one ``<eos>`` per line as in data.py.
- ``--device lazy`` moves the model and the batchified corpus to the lazy
  device and calls ``lm.mark_step()`` after each update (the one change the
  lazy tensor tutorial makes to a training loop); ``--device cpu`` is eager.
- ``--steps N`` stops each epoch after N batches (for quick runs and tests).
- ``torch.load`` of the saved model passes ``weights_only=False``: PyTorch's
  example calls ``torch.load(f)``, which since PyTorch 2.6 defaults to
  ``weights_only=True`` and refuses a pickled ``RNNModel`` on any device (the
  file is ours, so the full unpickler is safe here).
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import math
import os
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_mlir as lm

###############################################################################
# Data (data.py): a dictionary and a tokenized corpus
###############################################################################

CORPUS_MODULES = ("builtins", "os", "re", "json", "collections", "itertools", "functools",
                  "math", "string", "textwrap", "pathlib", "argparse")


class Dictionary:
    def __init__(self):
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


def docstring_lines(modules=CORPUS_MODULES) -> list[str]:
    """The non-empty docstring lines of the modules and their public members,
    in a fixed order (sorted member names)."""
    lines = []
    for name in modules:
        mod = importlib.import_module(name)
        docs = [inspect.getdoc(mod)]
        for attr in sorted(dir(mod)):
            if not attr.startswith("_"):
                docs.append(inspect.getdoc(getattr(mod, attr, None)))
        for doc in docs:
            if doc:
                lines.extend(ln.strip() for ln in doc.splitlines() if ln.strip())
    return lines


class Corpus:
    def __init__(self, lines: list[str]):
        self.dictionary = Dictionary()
        n = len(lines)
        n_train, n_valid = int(n * 0.8), int(n * 0.1)
        self.train = self.tokenize(lines[:n_train])
        self.valid = self.tokenize(lines[n_train:n_train + n_valid])
        self.test = self.tokenize(lines[n_train + n_valid:])

    def tokenize(self, lines: list[str]) -> torch.Tensor:
        ids = []
        for line in lines:
            for word in line.split() + ["<eos>"]:
                ids.append(self.dictionary.add_word(word))
        return torch.tensor(ids, dtype=torch.int64)


###############################################################################
# Models (model.py)
###############################################################################

class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        # dropout between the LSTM's layers, as in PyTorch's example
        self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError("When using the tied flag, nhid must be equal to emsize")
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.rnn_type, self.nhid, self.nlayers = rnn_type, nhid, nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == "LSTM":
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        return weight.new_zeros(self.nlayers, bsz, self.nhid)


class PositionalEncoding(nn.Module):
    """Sine and cosine positional encodings (Vaswani et al.), added to the
    embeddings, then dropout."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)


class TransformerModel(nn.Module):
    """Container module with an encoder, a causal nn.TransformerEncoder and a decoder."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super().__init__()
        self.model_type = "Transformer"
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        encoder_layers = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.encoder = nn.TransformerEncoder(encoder_layers, nlayers)
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        self.init_weights()

    @staticmethod
    def _generate_square_subsequent_mask(sz):
        return torch.log(torch.tril(torch.ones(sz, sz)))

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, has_mask=True):
        if has_mask:
            device = src.device
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                mask = self._generate_square_subsequent_mask(len(src)).to(device)
                self.src_mask = mask
        else:
            self.src_mask = None
        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.encoder(src, mask=self.src_mask)
        output = self.decoder(output)
        return F.log_softmax(output, dim=-1)


###############################################################################
# Training
###############################################################################

def batchify(data, bsz, device):
    # Work out how cleanly we can divide the dataset into bsz parts.
    nbatch = data.size(0) // bsz
    # Trim off any extra elements that wouldn't cleanly fit (remainders).
    data = data.narrow(0, 0, nbatch * bsz)
    # Evenly divide the data across the bsz batches.
    data = data.view(bsz, -1).t().contiguous()
    return data.to(device)


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i, bptt):
    # get_batch subdivides the source data into chunks of length bptt.
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def evaluate(model, data_source, args, ntokens, criterion, eval_batch_size):
    # Turn on evaluation mode which disables dropout.
    model.eval()
    total_loss = 0.0
    if args.model != "Transformer":
        hidden = model.init_hidden(eval_batch_size)
    n_batches = 0
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, args.bptt):
            data, targets = get_batch(data_source, i, args.bptt)
            if args.model == "Transformer":
                output = model(data)
                output = output.view(-1, ntokens)
            else:
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
            n_batches += 1
            if args.eval_steps and n_batches >= args.eval_steps:
                return total_loss / (i + len(data))
    return total_loss / (len(data_source) - 1)


def train(model, train_data, args, ntokens, criterion, lr, epoch):
    # Turn on training mode which enables dropout.
    model.train()
    total_loss = 0.0
    start_time = time.time()
    if args.model != "Transformer":
        hidden = model.init_hidden(args.batch_size)
    n_batches = (len(train_data) - 1 + args.bptt - 1) // args.bptt
    if args.steps:
        n_batches = min(n_batches, args.steps)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        if batch >= n_batches:
            break
        data, targets = get_batch(train_data, i, args.bptt)
        # Starting each batch, we detach the hidden state from how it was previously produced.
        # If we didn't, the model would try backpropagating all the way to start of the dataset.
        model.zero_grad()
        if args.model == "Transformer":
            output = model(data)
            output = output.view(-1, ntokens)
        else:
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()

        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        if args.device == "lazy":
            lm.mark_step()  # cut the step's graph: compile (or reuse) and run it

        total_loss += loss.item()

        if (batch + 1) % args.log_interval == 0 or batch + 1 == n_batches:
            n = (batch % args.log_interval) + 1
            cur_loss = total_loss / n
            elapsed = time.time() - start_time
            print("| epoch {:3d} | {:5d}/{:5d} batches | lr {:02.2f} | ms/batch {:7.2f} | "
                  "loss {:.6f} | ppl {:8.2f}".format(
                      epoch, batch + 1, n_batches, lr, elapsed * 1000 / n, cur_loss,
                      math.exp(cur_loss)), flush=True)
            total_loss = 0.0
            start_time = time.time()
        if args.dry_run:
            break


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="PyTorch word language model on cpu or lazy")
    parser.add_argument("--device", choices=("cpu", "lazy"), default="lazy")
    parser.add_argument("--model", type=str, default="LSTM", choices=("LSTM", "Transformer"),
                        help="type of network (LSTM, Transformer)")
    parser.add_argument("--emsize", type=int, default=64, help="size of word embeddings")
    parser.add_argument("--nhid", type=int, default=64,
                        help="number of hidden units per layer")
    parser.add_argument("--nlayers", type=int, default=2, help="number of layers")
    parser.add_argument("--lr", type=float, default=20, help="initial learning rate")
    parser.add_argument("--clip", type=float, default=0.25, help="gradient clipping")
    parser.add_argument("--epochs", type=int, default=2, help="upper epoch limit")
    parser.add_argument("--steps", type=int, default=100,
                        help="batches per epoch at most (0: the whole corpus)")
    parser.add_argument("--eval-steps", type=int, default=0,
                        help="evaluation batches at most (0: the whole split)")
    parser.add_argument("--batch_size", type=int, default=20, metavar="N", help="batch size")
    parser.add_argument("--bptt", type=int, default=35, help="sequence length")
    parser.add_argument("--dropout", type=float, default=0.2,
                        help="dropout applied to layers (0 = no dropout)")
    parser.add_argument("--tied", action="store_true",
                        help="tie the word embedding and softmax weights")
    parser.add_argument("--seed", type=int, default=1111, help="random seed")
    parser.add_argument("--log-interval", type=int, default=20, metavar="N",
                        help="report interval")
    parser.add_argument("--save", type=str, default="",
                        help="path to save the final model (default: a temporary file)")
    parser.add_argument("--nhead", type=int, default=2,
                        help="the number of heads in the encoder of the transformer model")
    parser.add_argument("--dry-run", action="store_true", help="verify the code and the model")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    # Set the random seed manually for reproducibility (the lazy device draws
    # from the CPU generator: the same seed gives the same weights and masks).
    torch.manual_seed(args.seed)
    device = torch.device(args.device)

    corpus = Corpus(docstring_lines())
    eval_batch_size = 10
    train_data = batchify(corpus.train, args.batch_size, device)
    val_data = batchify(corpus.valid, eval_batch_size, device)
    test_data = batchify(corpus.test, eval_batch_size, device)

    ntokens = len(corpus.dictionary)
    print(f"vocab size {ntokens}, train tokens {corpus.train.numel()}, device {args.device}")
    if args.model == "Transformer":
        model = TransformerModel(ntokens, args.emsize, args.nhead, args.nhid, args.nlayers,
                                 args.dropout).to(device)
    else:
        model = RNNModel(args.model, ntokens, args.emsize, args.nhid, args.nlayers,
                         args.dropout, args.tied).to(device)
    criterion = nn.NLLLoss()

    save = args.save or os.path.join(tempfile.mkdtemp(prefix="wlm_"), "model.pt")
    lr = args.lr
    best_val_loss = None
    for epoch in range(1, args.epochs + 1):
        epoch_start_time = time.time()
        train(model, train_data, args, ntokens, criterion, lr, epoch)
        val_loss = evaluate(model, val_data, args, ntokens, criterion, eval_batch_size)
        print("-" * 89)
        print("| end of epoch {:3d} | time: {:5.2f}s | valid loss {:.6f} | "
              "valid ppl {:8.2f}".format(epoch, (time.time() - epoch_start_time),
                                         val_loss, math.exp(val_loss)))
        print("-" * 89)
        # Save the model if the validation loss is the best we've seen so far.
        if not best_val_loss or val_loss < best_val_loss:
            with open(save, "wb") as f:
                torch.save(model, f)  # a lazy model is written as CPU tensors
            best_val_loss = val_loss
        else:
            # Anneal the learning rate if no improvement has been seen in the validation dataset.
            lr /= 4.0
        if args.dry_run:
            break

    # Load the best saved model: its parameters come back on the device they
    # were saved from (lazy:0 for a lazy model). PyTorch's example calls
    # torch.load(f) here; PyTorch >= 2.6 defaults to weights_only=True, which
    # refuses the pickled module class on any device, so we pass False.
    with open(save, "rb") as f:
        model = torch.load(f, weights_only=False)
        # after load the rnn params are not a continuous chunk of memory;
        # this makes them a continuous chunk (a no-op off CUDA)
        if args.model == "LSTM":
            model.rnn.flatten_parameters()
    assert next(model.parameters()).device.type == args.device

    # Run on test data.
    test_loss = evaluate(model, test_data, args, ntokens, criterion, eval_batch_size)
    print("=" * 89)
    print("| End of training | test loss {:.6f} | test ppl {:8.2f}".format(
        test_loss, math.exp(test_loss)))
    print("=" * 89)
    return test_loss


if __name__ == "__main__":
    main()
