"""The backend names PyTorch's own source registers, read without importing ``torch._dynamo``
(:mod:`bakeoff.target.dynamo_names`): the same names the live registry has, and the command
line's checks of a compiled target no longer import the compiler to find them."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

from bakeoff.target.dynamo_names import _registered_in, pytorch_backends


def test_the_names_read_are_the_live_registrys_own() -> None:
    import torch._dynamo
    from torch._dynamo.backends.registry import lookup_backend

    read = pytorch_backends()
    live = set(torch._dynamo.list_backends(exclude_tags=()))
    assert {"inductor", "aot_eager", "eager", "cudagraphs"} <= read
    assert read <= live, read - live  # nothing read that PyTorch does not register
    # what the registry has beyond them was registered by other packages (entry points, bakeoff's
    # engines, the seeded-fault backends other tests in this process registered): none by PyTorch
    missed = {name for name in live - read if _module_of(lookup_backend(name)).split(".")[0] == "torch"}
    assert not missed, missed


def _module_of(compiler_fn: object) -> str:
    return getattr(compiler_fn, "__module__", None) or type(compiler_fn).__module__


def test_every_form_of_registration_is_read_and_nothing_else() -> None:
    source = textwrap.dedent(
        """
        from torch._dynamo import register_backend
        from .registry import register_debug_backend as debug, register_backend as plain, lookup_backend

        @register_backend
        def bare(gm, inputs): ...

        @debug(name="named_by_decorator")
        def not_this_name(gm, inputs): ...

        @plain()
        def called_bare(gm, inputs): ...

        plain(name="named_by_call", compiler_fn=bare)
        plain(by_function)
        # plain(name="commented_out", compiler_fn=bare)
        lookup_backend("looked_up_not_registered")

        @some_other_decorator
        def not_registered(gm, inputs): ...
        """
    )
    assert _registered_in(ast.parse(source)) == {
        "bare",
        "named_by_decorator",
        "called_bare",
        "named_by_call",
        "by_function",
    }


def test_checking_a_compiled_target_of_pytorchs_own_backends_imports_no_compiler() -> None:
    code = textwrap.dedent(
        """
        import sys
        from bakeoff.errors import SpecError
        from bakeoff.target.detect import check_backend_name, unavailable_reason
        from bakeoff.target.spec import parse_target
        check_backend_name("aot_eager")
        reasons = [unavailable_reason(parse_target(t)) for t in ("cpu+inductor", "cpu+aot_eager")]
        print(reasons, "torch._dynamo" in sys.modules)
        try:  # the control: a typo is still refused, from the imported registry
            check_backend_name("inductr")
        except SpecError as exc:
            print("refused", "torch._dynamo" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[None, None] False", "refused True"]
