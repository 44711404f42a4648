"""Compose a recipe with Hydra, then merge it into the typed schema.

Recipes are Hydra primary configs in ``recipes/``; config groups live in ``conf/``
and are found through Hydra's search path. Overrides are Hydra override strings
exactly as a user types them (``parallel.pp=8``, ``cluster=h100``, ``+x=1``).
Every Hydra or OmegaConf failure is translated into a :class:`UserError` whose
one line names the field.
"""

from __future__ import annotations

import functools
import re
from typing import Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from optbench.common.checkout import repo_root
from optbench.compose import release_layout
from optbench.compose.config_files import check_config_files
from optbench.compose.pipeline import follow_stage_overrides
from optbench.config import overrides as typed
from optbench.config.domains import check_domains
from optbench.config.optimizers import REGISTRY
from optbench.config.schema import RunConfig
from optbench.config.serialize import closest, to_run_config, translate_schema_error, unknown_key_problem
from optbench.common.errors import Problem, UserError
from optbench.common.redact import remember_secret, secret_problems


def list_recipes() -> list[str]:
    """Names of every recipe file under recipes/."""
    return sorted(p.stem for p in (repo_root() / "recipes").glob("*.yaml"))


def recipe_description(name: str) -> str:
    """A recipe's ``description:`` line as written (read as text, not composed: listing never runs Hydra), or ""."""
    import re

    path = repo_root() / "recipes" / f"{name}.yaml"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")[:MAX_LISTED_BYTES]
    except OSError:
        return ""
    match = re.search(r"^description:[ \t]*(.*)$", text, re.MULTILINE)
    return " ".join(match.group(1).strip().strip("'\"").split()) if match else ""


MAX_LISTED_BYTES = 1 << 16
"""How much of a recipe file ``make recipes`` reads for its description (a recipe is a few KB)."""


def list_group_options(group: str) -> list[str]:
    """Names of every option of one config group under conf/<group>/: a model's own options sit in its folder
    (``kimi_k2/gb300_256`` is conf/parallel/kimi_k2/gb300_256.yaml)."""
    base = repo_root() / "conf" / group
    return sorted(p.relative_to(base).with_suffix("").as_posix() for p in base.rglob("*.yaml"))


def _keyed_cause(err: BaseException) -> OmegaConfBaseException | None:
    """The innermost OmegaConf error in the chain that knows which key failed."""
    found = None
    while err is not None:
        if isinstance(err, OmegaConfBaseException) and getattr(err, "full_key", None):
            found = err
        err = err.__cause__ or err.__context__  # type: ignore[assignment]
    return found


def _innermost_text(err: BaseException) -> str:
    """First line of the innermost error in the chain (what actually went wrong)."""
    text = str(err)
    while err is not None:
        if str(err).strip():
            text = str(err)
        err = err.__cause__ or err.__context__  # type: ignore[assignment]
    return text.strip().splitlines()[0] if text.strip() else ""


def _translate_hydra_error(err: Exception, overrides: Sequence[str]) -> UserError:
    text = str(err)
    cause = _keyed_cause(err)
    if cause is not None:
        error = translate_schema_error(cause)
        first = error.problems[0]
        typed_below = [k for k in (typed.typed_key(o) for o in overrides) if k and k.startswith(f"{first.field}.")]
        if typed_below and first.message.startswith("unknown key"):  # a section we lack: judge the key typed in it
            return UserError(unknown_key_problem(typed_below[0]))
        return error
    merging = re.search(r"Error merging override (.+)", text)
    if merging:
        key = typed.typed_key(merging.group(1)) or "overrides"
        return UserError(Problem(key, f"cannot take this value: {_innermost_text(err)}"))
    missing = re.search(r"Could not find '([^'/]+)/([^']+)'", text)
    if missing:
        return UserError(_no_option(*missing.groups()))
    ambiguous = re.search(r"Ambiguous value for argument '([^']+)'", text)
    if ambiguous:
        return UserError(
            Problem(
                ambiguous.group(1).split("=")[0],
                "a comma-separated value is a sweep; use `make sweep` (or quote it to pass a string)",
            )
        )
    appended = re.search(r"Could not append to config\. An item is already at '([^']+)'", text)
    if appended:
        key = appended.group(1)
        return UserError(Problem(key, f"already exists; set it without the '+' ({key}=<value>)"))
    if type(err).__name__ == "OverrideParseException":
        return UserError(Problem("overrides", f"cannot parse {list(overrides)}: {text.splitlines()[0]}"))
    if "Unexpected type for root: NoneType" in text:
        keys = [typed.typed_key(o) for o in overrides]
        key = next((k for k in keys if any(k.startswith(s + ".") for s in _NULLABLE_SECTIONS)), "overrides")
        section = next((s for s in _NULLABLE_SECTIONS if key.startswith(s + ".")), "optimizer.muon")
        group = section.rpartition(".")[2]
        return UserError(
            Problem(
                key,
                f"is a setting of a section this run does not have ({section} is set by optimizer={group}); "
                f"select the group first, e.g. optimizer={group}",
            )
        )
    keys = [typed.typed_key(o) for o in overrides]
    reason = _innermost_text(err) or type(err).__name__
    if reason.startswith("Unexpected type"):
        reason = "sets a part of a value that is null in this recipe; give the whole value (key=[...] or key={...})"
    return UserError(Problem((keys[-1] or "overrides") if len(keys) == 1 else "config", reason))


_NULLABLE_SECTIONS = tuple(f"optimizer.{s}" for s in dict.fromkeys(s for e in REGISTRY.values() for s in e.sections))
"""Sections of the schema that are null in some presets (each optimizer's own settings)."""


_UNUSED_HYDRA = ("help", "hydra_help", "launcher", "sweeper", "output", "env")
"""Hydra's own config groups that :func:`hydra.compose` never reads."""


SCHEMA_NAME = "run_schema"
"""conf/base.yaml lists this first, so Hydra composes every group into the typed schema."""


@functools.cache
def _register_schema() -> None:
    """Put the schema into Hydra's config store, once per process (storing converts the whole dataclass tree)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=SCHEMA_NAME, node=RunConfig)


def compose_dictconfig(recipe: str, overrides: Sequence[str] = ()) -> DictConfig:
    """Hydra composition of recipes/<recipe>.yaml with conf/ groups and the overrides, typed by the schema.

    Composed by :func:`hydra.compose` alone, once per call: no merge of our own, no cache, nothing of Hydra's
    internals, so a Hydra or OmegaConf upgrade composes what Hydra composes (about 0.25 s warm on 2 cores)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    root = repo_root()
    recipes = list_recipes()
    if recipe not in recipes:
        raise UserError(
            Problem("RECIPE", f"no recipe '{recipe}'{closest(recipe, recipes)}; available: {', '.join(recipes)}")
        )
    check_config_files(root)
    search = f"hydra.searchpath=[file://{root / 'conf'}]"
    # compose() never configures logging, launches, sweeps, prints help or makes an output folder, and drops
    # the hydra node from what it returns: Hydra's configs for those would be loaded and merged for nothing
    # (about an eighth of a composition; the composed run is the same: tests/test_recipes.py).
    quiet = ["hydra/job_logging=none", "hydra/hydra_logging=none", *(f"~hydra/{group}" for group in _UNUSED_HYDRA)]

    def attempt(typed_overrides: Sequence[str]) -> DictConfig:
        _register_schema()
        with initialize_config_dir(config_dir=str(root / "recipes"), version_base="1.3"):
            return compose(config_name=recipe, overrides=[search, *quiet, f"++recipe={recipe}", *typed_overrides])

    failures = (HydraException, OmegaConfBaseException, ValueError, AssertionError)
    try:
        return attempt(overrides)
    except failures as err:
        error = _translate_hydra_error(err, overrides)
        if error.problems[0].field in ("config", "overrides") and len(overrides) > 1:
            culprit = _first_failing(overrides, attempt, failures)
            error = UserError(Problem(typed.typed_key(culprit) or "overrides", error.problems[0].message))
        raise error from err


def _first_failing(overrides: Sequence[str], attempt, failures: tuple) -> str:
    """The override that makes composition fail: the shortest failing prefix, by bisection (a few composes)."""
    low, high = 0, len(overrides)  # overrides[:low] composes; overrides[:high] fails
    while high - low > 1:
        middle = (low + high) // 2
        try:
            attempt(overrides[:middle])
            low = middle
        except failures:
            high = middle
    return overrides[high - 1]


def _group_choices(overrides: Sequence[str], sweeping: bool) -> list[Problem]:
    """A group typed with a value that is none of its options (a path such as ``../model/kimi_k2`` included, which
    Hydra would read from another group's folder)."""
    problems = []
    for override in overrides:
        group, sep, value = override.partition("=")
        if not sep or group not in typed.CONFIG_GROUPS or "(" in value:  # choice(...), glob(...): Hydra's grammar
            continue
        options = list_group_options(group)
        problems += [_no_option(group, o) for o in (value.split(",") if sweeping else [value]) if o not in options]
    return problems


def _no_option(group: str, option: str) -> Problem:
    """'<group>: no option '<option>' (did you mean ...?); available: ...', Hydra's refusal and ours alike."""
    options = list_group_options(group)
    return Problem(group, f"no option '{option}'{closest(option, options)}; available: {', '.join(options)}")


def check_typed_overrides(overrides: Sequence[str], sweeping: bool = False) -> None:
    """Refuse overrides that are too many or too long, that Hydra would read past the schema (config.overrides), or
    that choose what is not an option of a group."""
    checks = (typed.check_text, lambda o: typed.check_syntax(o, sweeping), lambda o: _group_choices(o, sweeping))
    for check in checks:
        problems = list(check(overrides))
        if problems:
            raise UserError(problems)


def compose_run(recipe: str, overrides: Sequence[str] = ()) -> RunConfig:
    """Compose and type-check one run: the single entry point for every command.

    Every value is checked against its domain (:mod:`optbench.config.domains`) before anything is
    derived from it, so that no input can make the steps after this fail or run unbounded.
    """
    check_typed_overrides(overrides)
    cfg = compose_dictconfig(recipe, overrides)
    run = _checked(cfg, overrides)
    # A later container's preset may hold another layout than the recipe's (Bridge 0.3.1) one: NVIDIA's values
    # go in as if typed before the user's overrides (the user's win; the plan lists them as departures).
    release = release_layout.layout_values(run, overrides)
    if release:
        # Set as Hydra sets a value override (OmegaConf.update, merging): the config composing the release's
        # overrides before the user's gives, since none of them names a field, or a group, the user typed. They
        # are NVIDIA's numbers and names, never an account or a credential: the first secret check still holds.
        for field, value in release.items():
            OmegaConf.update(cfg, field, value, merge=True)
        run = _checked(cfg, [*release_layout.as_overrides(release), *overrides], secrets_checked=True)
    return release_layout.sequence_parallel_follows_tp(follow_stage_overrides(run, overrides), overrides)


def _checked(cfg: DictConfig, overrides: Sequence[str], secrets_checked: bool = False) -> RunConfig:
    """The typed run of a composed config, after its secret, engine-scope and domain checks."""
    secrets = [] if secrets_checked else secret_problems(cfg)
    if secrets:  # alone: other messages could quote the value
        raise UserError(secrets)
    run = to_run_config(cfg)
    remember_secret(run.cluster.account)
    problems = [*typed.check_engine_fields(run, overrides), *check_domains(run)]
    if problems:
        raise UserError(problems)
    return run
