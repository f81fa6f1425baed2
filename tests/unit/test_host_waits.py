"""``passes/host_waits``: a module with a barrier (a host wait in IREE's
stream) carries the mark into its vmfb, where ``Session.load`` reads it."""
from __future__ import annotations

import iree.compiler as ic

from lazy_mlir.dialects.torch_import import parse
from lazy_mlir.passes import conv_channels_last as ccl
from lazy_mlir.passes import host_waits

from test_conv_channels_last import NARROW, WIDE, module


def test_a_module_with_barriers_is_marked_for_the_calls_device():
    """A barrier is a host wait in IREE's stream: the module gets the empty
    export ``NAME`` (which the vmfb carries, ``Session.load`` reads
    it); a module without a barrier is left as it was."""
    from lazy_mlir.runtime.session import HOST_WAITS_MARK
    plain = parse(module(NARROW))
    assert host_waits.mark_host_waits(plain) == 0 and host_waits.NAME not in str(plain)
    m = parse(module(WIDE))
    ccl.to_channels_last(m)
    assert host_waits.mark_host_waits(m) == 1
    m.operation.verify()
    flags = ["--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]
    vmfb = ic.compile_str(str(m), extra_args=flags)
    assert HOST_WAITS_MARK == host_waits.NAME.encode() and HOST_WAITS_MARK in vmfb
    assert HOST_WAITS_MARK not in ic.compile_str(str(plain), extra_args=flags)
