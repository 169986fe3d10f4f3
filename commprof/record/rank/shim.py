"""Template of the ``sitecustomize.py`` that ``commprof record`` puts first on the ranks' PYTHONPATH.

The launcher copies this file into a private folder. It must stay cheap for every Python process the
command starts (most are not ranks) and must run the ``sitecustomize`` it shadows, if any.
"""

import os
import sys


def _commprof_boot() -> None:
    env = os.environ
    if not env.get("COMMPROF_RUN_DIR") or env.get("COMMPROF_RANK_PID"):
        return
    if env.get("RANK") is None and env.get("COMMPROF_SINGLE_PROCESS") != "1":
        return
    package = env.get("COMMPROF_RANK_PACKAGE")
    if not package:
        return
    try:
        import importlib.util

        init = os.path.join(package, "__init__.py")
        spec = importlib.util.spec_from_file_location("_commprof_rank", init, submodule_search_locations=[package])
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["_commprof_rank"] = module
        spec.loader.exec_module(module)
        module.boot()
    except Exception as err:
        sys.stderr.write(f"commprof: warning: rank bootstrap failed ({type(err).__name__}: {err}); not profiling\n")


def _commprof_chain() -> None:
    """Run the ``sitecustomize`` this file shadows (the user's or the environment's), as ``site``
    would have, and take our folder off ``sys.path`` for the user's code."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))

    def is_here(entry: str) -> bool:
        try:
            return os.path.abspath(entry or os.getcwd()) == here
        except OSError:
            return False

    sys.path[:] = [p for p in sys.path if not is_here(p)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # only as the copy on a rank's path, never when imported from the package
    _commprof_boot()
    _commprof_chain()
