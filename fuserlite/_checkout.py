"""Where fuserlite.passes is found when this package runs from a source checkout."""

import importlib.util
import sys
from pathlib import Path

# The passes live in passes/ at the top of a checkout (one module per pass) and are
# installed as fuserlite.passes. An editable install maps the name; so does a wheel,
# which copies them in. Where this package was imported from a checkout whose
# fuserlite/ has no passes/ (the checkout shadowing a non-editable install:
# `python -m fuserlite.cli` run from its root), find them beside it the same way.
_CHECKOUT_PASSES = Path(__file__).resolve().parent.parent / "passes"
if (
    not (Path(__file__).resolve().parent / "passes").is_dir()
    and (_CHECKOUT_PASSES / "__init__.py").is_file()
    and "fuserlite.passes" not in sys.modules
):

    class _CheckoutPasses:
        """A finder for fuserlite.passes alone (its modules follow its path)."""

        @staticmethod
        def find_spec(name: str, path: object = None, target: object = None):
            if name != "fuserlite.passes":
                return None
            return importlib.util.spec_from_file_location(
                name,
                _CHECKOUT_PASSES / "__init__.py",
                submodule_search_locations=[str(_CHECKOUT_PASSES)],
            )

    sys.meta_path.append(_CheckoutPasses)
