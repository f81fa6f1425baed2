"""An image classifier in the style of PyTorch's ImageNet example
(pytorch/examples, imagenet/main.py), on ``cpu`` or ``lazy``: a small CNN on
scikit-learn's 8x8 handwritten digits (nothing is downloaded).

Run: python examples/image_classifier.py --device lazy [--epochs 4] [--steps N]
     [--checkpoint-dir DIR] [--resume DIR/checkpoint.pth.tar]

As imagenet/main.py: SGD with momentum and weight decay, ``StepLR``, top-1 /
top-5 accuracy meters, a checkpoint after every epoch (``{'epoch', 'arch',
'state_dict', 'best_acc1', 'optimizer', 'scheduler'}``, best copied to
``model_best.pth.tar``) and ``--resume`` from one. On ``lazy`` the model and
every batch live on the lazy device and ``lm.mark_step()`` follows each
update; a checkpoint holds the values (CPU tensors in the file, loaded back
onto ``lazy:0``, the device they were saved from).
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

import lazy_mlir as lm


def digits_datasets(test_fraction=0.2, seed=0):
    """scikit-learn's digits as 1x8x8 float images, normalized; a fixed split."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = (x - x.mean()) / x.std()
    y = torch.tensor(d.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = int(len(y) * test_fraction)
    test, train = perm[:n_test], perm[n_test:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[test], y[test])


class SmallCNN(nn.Module):
    def __init__(self, num_classes=10, dropout=0.25):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),                                   # 32 x 4 x 4
        )
        self.classifier = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(32 * 4 * 4, 64), nn.ReLU(inplace=True),
            nn.Linear(64, num_classes),
        )

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def train(loader, model, criterion, optimizer, epoch, device, args):
    batch_time = AverageMeter("Time", ":6.3f")
    losses = AverageMeter("Loss", ":.6f")
    top1 = AverageMeter("Acc@1", ":6.2f")
    top5 = AverageMeter("Acc@5", ":6.2f")
    n_batches = min(len(loader), args.steps) if args.steps else len(loader)
    progress = ProgressMeter(n_batches, [batch_time, losses, top1, top5],
                             prefix=f"Epoch: [{epoch}]")

    # switch to train mode
    model.train()
    end = time.time()
    for i, (images, target) in enumerate(loader):
        if i >= n_batches:
            break
        images, target = images.to(device), target.to(device)

        # compute output
        output = model(images)
        loss = criterion(output, target)

        # compute gradient and do SGD step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.device == "lazy":
            lm.mark_step()

        # measure accuracy and record loss (reads the step's results)
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        losses.update(loss.item(), images.size(0))
        top1.update(acc1[0].item(), images.size(0))
        top5.update(acc5[0].item(), images.size(0))

        # measure elapsed time
        batch_time.update(time.time() - end)
        end = time.time()
        if (i + 1) % args.print_freq == 0 or i + 1 == n_batches:
            progress.display(i + 1)


def validate(loader, model, criterion, device, args):
    losses = AverageMeter("Loss", ":.6f")
    top1 = AverageMeter("Acc@1", ":6.2f")
    top5 = AverageMeter("Acc@5", ":6.2f")

    # switch to evaluate mode
    model.eval()
    with torch.no_grad():
        for images, target in loader:
            images, target = images.to(device), target.to(device)
            output = model(images)
            loss = criterion(output, target)
            acc1, acc5 = accuracy(output, target, topk=(1, 5))
            losses.update(loss.item(), images.size(0))
            top1.update(acc1[0].item(), images.size(0))
            top5.update(acc5[0].item(), images.size(0))
    print(f" * Acc@1 {top1.avg:.3f} Acc@5 {top5.avg:.3f} Loss {losses.avg:.6f}", flush=True)
    return top1.avg


def save_checkpoint(state, is_best, directory, filename="checkpoint.pth.tar"):
    path = os.path.join(directory, filename)
    torch.save(state, path)
    if is_best:
        shutil.copyfile(path, os.path.join(directory, "model_best.pth.tar"))


class AverageMeter:
    """Computes and stores the average and current value"""

    def __init__(self, name, fmt=":f"):
        self.name, self.fmt = name, fmt
        self.reset()

    def reset(self):
        self.val = self.avg = self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def __str__(self):
        fmtstr = "{name} {val" + self.fmt + "} ({avg" + self.fmt + "})"
        return fmtstr.format(**self.__dict__)


class ProgressMeter:
    def __init__(self, num_batches, meters, prefix=""):
        num_digits = len(str(num_batches))
        self.batch_fmtstr = "[{:" + str(num_digits) + "d}/" + str(num_batches) + "]"
        self.meters, self.prefix = meters, prefix

    def display(self, batch):
        entries = [self.prefix + self.batch_fmtstr.format(batch)]
        entries += [str(meter) for meter in self.meters]
        print("\t".join(entries), flush=True)


def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))
        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Digits classifier (imagenet/main.py style)")
    parser.add_argument("--device", choices=("cpu", "lazy"), default="lazy")
    parser.add_argument("--epochs", default=4, type=int, help="number of total epochs to run")
    parser.add_argument("--steps", default=0, type=int,
                        help="batches per epoch at most (0: the whole training set)")
    parser.add_argument("--start-epoch", default=0, type=int,
                        help="manual epoch number (useful on restarts)")
    parser.add_argument("-b", "--batch-size", default=64, type=int, help="mini-batch size")
    parser.add_argument("--lr", "--learning-rate", default=0.05, type=float,
                        help="initial learning rate", dest="lr")
    parser.add_argument("--momentum", default=0.9, type=float, help="momentum")
    parser.add_argument("--wd", "--weight-decay", default=1e-4, type=float,
                        help="weight decay", dest="weight_decay")
    parser.add_argument("--lr-step", default=2, type=int, help="StepLR's step_size (epochs)")
    parser.add_argument("-p", "--print-freq", default=10, type=int, help="print frequency")
    parser.add_argument("--resume", default="", type=str,
                        help="path to latest checkpoint (default: none)")
    parser.add_argument("--checkpoint-dir", default="", type=str,
                        help="where checkpoints go (default: a temporary directory)")
    parser.add_argument("--dropout", default=0.25, type=float, help="dropout before the classifier")
    parser.add_argument("--seed", default=0, type=int, help="seed for initializing training")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)

    train_dataset, val_dataset = digits_datasets()
    model = SmallCNN(dropout=args.dropout).to(device)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    # Sets the learning rate to the initial LR decayed by 10 every lr_step epochs
    scheduler = StepLR(optimizer, step_size=args.lr_step, gamma=0.1)

    best_acc1 = 0.0
    # optionally resume from a checkpoint
    if args.resume:
        if not os.path.isfile(args.resume):
            raise SystemExit(f"=> no checkpoint found at '{args.resume}'")
        print(f"=> loading checkpoint '{args.resume}'")
        # The default weights_only=True reads it: state dicts of plain tensors.
        # Lazy tensors load back onto lazy:0; map_location moves a checkpoint
        # written elsewhere (imagenet/main.py maps to its GPU the same way).
        checkpoint = torch.load(args.resume, map_location=device)
        args.start_epoch = checkpoint["epoch"]
        best_acc1 = checkpoint["best_acc1"]
        model.load_state_dict(checkpoint["state_dict"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        print(f"=> loaded checkpoint '{args.resume}' (epoch {checkpoint['epoch']})")

    # Each epoch shuffles with a generator seeded by (seed, epoch), so that a
    # resumed run sees the batches the uninterrupted run would have seen.
    val_loader = DataLoader(val_dataset, batch_size=512, shuffle=False)  # one batch
    checkpoint_dir = args.checkpoint_dir or tempfile.mkdtemp(prefix="digits_ckpt_")
    os.makedirs(checkpoint_dir, exist_ok=True)

    acc1 = 0.0
    for epoch in range(args.start_epoch, args.epochs):
        g = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        train_loader = DataLoader(train_dataset, batch_size=args.batch_size, shuffle=True,
                                  generator=g, drop_last=True)
        # train for one epoch
        train(train_loader, model, criterion, optimizer, epoch, device, args)
        # evaluate on validation set
        acc1 = validate(val_loader, model, criterion, device, args)
        scheduler.step()

        # remember best acc@1 and save checkpoint
        is_best = acc1 > best_acc1
        best_acc1 = max(acc1, best_acc1)
        save_checkpoint({
            "epoch": epoch + 1,
            "arch": "SmallCNN",
            "state_dict": model.state_dict(),
            "best_acc1": best_acc1,
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
        }, is_best, checkpoint_dir)
    print(f"done: epochs {args.start_epoch}..{args.epochs}, last Acc@1 {acc1:.3f}, "
          f"best Acc@1 {best_acc1:.3f}, lr {scheduler.get_last_lr()[0]:.6f}, "
          f"checkpoint {os.path.join(checkpoint_dir, 'checkpoint.pth.tar')}")
    return best_acc1


if __name__ == "__main__":
    main()
