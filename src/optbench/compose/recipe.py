"""Compose a recipe with Hydra, then merge it into the typed schema.

Recipes are Hydra primary configs in ``recipes/``; config groups live in ``conf/``
and are found through Hydra's search path. Overrides are Hydra override strings
exactly as a user types them (``parallel.pp=8``, ``cluster=h100``, ``+x=1``).
Every Hydra or OmegaConf failure is translated into a :class:`UserError` whose
one line names the field.
"""

from __future__ import annotations

import functools
import pickle
import re
from pathlib import Path
from typing import Callable, Sequence

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from optbench.checkout import repo_root
from optbench.compose import release_layout
from optbench.compose.config_files import check_config_files
from optbench.compose.pipeline import follow_stage_overrides
from optbench.compose.reuse import compose_with_kept_groups
from optbench.config import overrides as typed
from optbench.config.domains import check_domains
from optbench.config.schema import RunConfig
from optbench.config.serialize import closest, to_run_config, translate_schema_error
from optbench.errors import Problem, UserError
from optbench.redact import remember_secret, secret_problems


def list_recipes() -> list[str]:
    """Names of every recipe file under recipes/."""
    return sorted(p.stem for p in (repo_root() / "recipes").glob("*.yaml"))


def list_group_options(group: str) -> list[str]:
    """Names of every option of one config group under conf/<group>/."""
    return sorted(p.stem for p in (repo_root() / "conf" / group).glob("*.yaml"))


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
        return translate_schema_error(cause)
    merging = re.search(r"Error merging override (.+)", text)
    if merging:
        key = typed.typed_key(merging.group(1)) or "overrides"
        return UserError(Problem(key, f"cannot take this value: {_innermost_text(err)}"))
    missing = re.search(r"Could not find '([^']+)/([^']+)'", text)
    if missing:
        group, option = missing.groups()
        options = list_group_options(group)
        return UserError(
            Problem(group, f"no option '{option}'{closest(option, options)}; available: {', '.join(options)}")
        )
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
            Problem(key, f"is a setting of a section this run does not have ({section} is set by optimizer={group}); "
                    f"select the group first, e.g. optimizer={group}")
        )
    keys = [typed.typed_key(o) for o in overrides]
    reason = _innermost_text(err) or type(err).__name__
    if reason.startswith("Unexpected type"):
        reason = "sets a part of a value that is null in this recipe; give the whole value (key=[...] or key={...})"
    return UserError(Problem((keys[-1] or "overrides") if len(keys) == 1 else "config", reason))


_NULLABLE_SECTIONS = ("optimizer.muon", "optimizer.adaptive_muon", "optimizer.soap")
"""Sections of the schema that are null in some presets (Optional dataclasses)."""


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
    """Hydra composition of recipes/<recipe>.yaml with conf/ groups and the overrides, typed by the schema."""
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
    # (the six groups removed here were 13 % of a composition, 0.093 -> 0.081 s warm, the logging ones an eighth
    # before; the composed run is the same: tests/test_recipes.py).
    quiet = ["hydra/job_logging=none", "hydra/hydra_logging=none", *(f"~hydra/{group}" for group in _UNUSED_HYDRA)]

    def hydra_compose(typed_overrides: Sequence[str]) -> DictConfig:
        from hydra import compose, initialize_config_dir

        _register_schema()  # only when Hydra merges: a kept merge is typed already
        with initialize_config_dir(config_dir=str(root / "recipes"), version_base="1.3"):
            return compose(config_name=recipe, overrides=[search, *quiet, f"++recipe={recipe}", *typed_overrides])

    native_merge = defaults_merge_of(root, recipe)

    def attempt(typed_overrides: Sequence[str]) -> DictConfig:
        return compose_with_kept_groups(root, recipe, typed_overrides, hydra_compose, merge=native_merge)

    failures = (HydraException, OmegaConfBaseException, ValueError, AssertionError)
    try:
        return attempt(overrides)
    except failures as err:
        error = _translate_hydra_error(err, overrides)
        if error.problems[0].field in ("config", "overrides") and len(overrides) > 1:
            culprit = _first_failing(overrides, attempt, failures)
            error = UserError(Problem(typed.typed_key(culprit) or "overrides", error.problems[0].message))
        raise error from err


def defaults_merge_of(root: Path, recipe: str) -> Callable[[Sequence[str]], DictConfig | None]:
    """What ``hydra_compose(groups)`` of :func:`compose_dictconfig` composes, merged by
    :mod:`optbench.compose.defaults_merge` (about a quarter of Hydra's time); None where that module does not
    cover the composition or the merge fails (Hydra then composes it and raises its own error)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from optbench.compose import defaults_merge
    from optbench.compose.loaded_files import file_data, kept_for_files

    def merge(groups: Sequence[str]) -> DictConfig | None:
        try:
            cfg = defaults_merge.merged(root, recipe, groups, file_data, (SCHEMA_NAME, _schema_node),
                                         kept_for_files())
            named = OverridesParser.create().parse_overrides([f"++recipe={recipe}"])
            ConfigLoaderImpl._apply_overrides_to_config(named, cfg)
        except Exception:  # noqa: BLE001 - Hydra composes it again and raises its own error, as without this path
            return None
        return cfg

    return merge


def _schema_node() -> DictConfig:
    """The schema as Hydra's config store hands it to a composition: a fresh copy of ``OmegaConf.structured`` of
    it (what the store keeps), from pickled bytes (a sixth of the store's deep copy)."""
    return pickle.loads(_structured_schema())


@functools.cache
def _structured_schema() -> bytes:
    from omegaconf import OmegaConf

    # Its nodes are built here, so they need not be deep-copied into their parents (a third of the time): the
    # flag is cleared again, and the node is the one OmegaConf.structured(RunConfig) gives (tests/test_defaults_merge).
    node = OmegaConf.structured(RunConfig, flags={"no_deepcopy_set_nodes": True})
    node._set_flag("no_deepcopy_set_nodes", None)
    return pickle.dumps(node, protocol=pickle.HIGHEST_PROTOCOL)


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


def check_typed_overrides(overrides: Sequence[str], sweeping: bool = False) -> None:
    """Refuse overrides that are too many or too long, or that Hydra would read past the schema (config.overrides)."""
    for check in (typed.check_text, lambda o: typed.check_syntax(o, sweeping)):
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
    release = release_layout.layout_overrides(run, overrides)
    if release:
        _apply_before_user(cfg, release)
        # The release's values are NVIDIA's numbers and names, never an account or a credential: the secret
        # check of the first pass still holds.
        run = _checked(cfg, [*release, *overrides], secrets_checked=True)
    follow_stage_overrides(run, overrides)
    return run


def _apply_before_user(cfg: DictConfig, release: Sequence[str]) -> None:
    """Apply the release's value overrides to a composed config as Hydra applies value overrides.

    :func:`release_layout.layout_overrides` never names a field the user typed, nor one of a group the user
    gave another option (Hydra applies a group choice before every value override, so one that restates the
    recipe's is no obstacle), so applying them after the user's overrides gives the config that composing
    ``[*release, *user]`` gives, without composing the recipe a second time.
    """
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    ConfigLoaderImpl._apply_overrides_to_config(OverridesParser.create().parse_overrides(list(release)), cfg)


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
