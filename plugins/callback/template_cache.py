"""Callback gpulab.slurm_cluster.template_cache: each template string compiled once per run."""

from __future__ import annotations

DOCUMENTATION = r"""
name: template_cache
author: slurm-cluster-in-a-box contributors (@gpulab)
version_added: 0.1.0
type: aggregate
short_description: Compile each template string once per run, not once per host
description:
  - >-
    ansible-core 2.19 compiles every template string and every condition anew each
    time it renders it: Jinja parses it, generates Python source and compiles that.
    A condition or a looked-up template file that every host renders is compiled once
    per host, and a no-change C(site.yml) rerun spent about a tenth of Ansible's own
    process compiling the same strings again.
  - >-
    With this callback enabled, Ansible's own process keeps the compiled code of each
    template string and condition it compiles, keyed on the string and on everything
    else the code depends on (the Jinja environment's class, its delimiters and
    whitespace settings, its extensions, finalize and autoescape, and Ansible's
    backslash escaping and embedded-template setting at compile time). The next
    rendering builds its template from the kept code, bound to its own environment and
    variables, so what renders and the errors raised are the same as without it.
  - >-
    Only code that compiled is kept: a string that fails to compile is compiled, and
    fails, each time, as before. Trust is checked before compiling, as before: an
    untrusted string is never compiled, kept or not.
  - >-
    Workers forked after a string was compiled here find it compiled; what a worker
    compiles stays in that worker.
  - >-
    It also resolves each filter and test name once per process. ansible-core 2.19
    resolves a name anew in each template environment it makes: for a collection's
    name, and for each of Jinja's own filters (such as C(first) or C(length)), which
    it first looks for in the collection C(ansible.builtin), it lists the
    collection's filter files and asks each for its filters (a no-change C(site.yml)
    rerun: about 1,300 resolutions, 0.46 s of Ansible's own process). The first
    answer for a name is kept, also where no plugin has it (Jinja's own filter is
    then used, as before); a name that fails to resolve is resolved, and fails, each
    time. The kept answers are dropped when Ansible adds a plugin folder.
  - >-
    It only acts on the ansible-core release it was written against (2.19) with Jinja
    3.1; on another it does nothing, and also while Ansible's template debugging is on.
    E(GPULAB_TEMPLATE_CACHE=0) turns it off for a run. At C(-vv) the run ends with how
    many strings were compiled and how many compilations and name resolutions were
    saved.
  - >-
    Enable it with C(callbacks_enabled = gpulab.slurm_cluster.template_cache) in
    ansible.cfg (the project's ansible.cfg does).
requirements:
  - enable in configuration
"""

import contextlib  # noqa: E402
import hashlib  # noqa: E402
import marshal  # noqa: E402
import os  # noqa: E402
import stat  # noqa: E402
import typing as t  # noqa: E402

from ansible.module_utils.ansible_release import __version__ as ANSIBLE_VERSION  # noqa: E402
from ansible.plugins.callback import CallbackBase  # noqa: E402
from ansible.utils.display import Display  # noqa: E402

# The releases whose compile steps this callback reproduces: Jinja's
# Environment.compile_expression (parse, assign to "result", compile), and
# ansible-core's _TemplateCompileContext and _TemplateConfig read at compile time.
SUPPORTED = ("2.19.",)
JINJA_SUPPORTED = ("3.1.",)
# Distinct strings kept at most (a no-change site.yml rerun on four hosts:
# about 650 compilations of 110-150 strings in Ansible's own process, 04:10):
# beyond it, the oldest half is dropped.
LIMIT = 8192
# What Jinja's lexer is made from (jinja2.lexer.get_lexer).
LEXER_FIELDS = (
    "block_start_string",
    "block_end_string",
    "variable_start_string",
    "variable_end_string",
    "comment_start_string",
    "comment_end_string",
    "line_statement_prefix",
    "line_comment_prefix",
    "trim_blocks",
    "lstrip_blocks",
    "newline_sequence",
    "keep_trailing_newline",
)


class Cache:
    """Compiled code by key; counts what was compiled and what was reused.

    With a folder (this run's private one), code compiled in any process of the
    run is also written there, and a process that lacks it reads it from there:
    a worker finds what an earlier worker compiled."""

    def __init__(self, limit: int = LIMIT, folder: str | None = None) -> None:
        self.limit = limit
        self.folder = folder
        self.code: dict[tuple, t.Any] = {}
        self.compiled = 0
        self.reused = 0
        self.read = 0

    def get(self, key: tuple, make: t.Callable[[], t.Any]) -> t.Any:
        code = self.code.get(key)
        if code is not None:
            self.reused += 1
            return code
        path = os.path.join(self.folder, digest(key)) if self.folder else None
        code = self.load(path) if path else None
        if code is not None:
            self.read += 1
        else:
            code = make()
            self.compiled += 1
            if path:
                self.store(path, code)
        if len(self.code) >= self.limit:
            for old in list(self.code)[: self.limit // 2]:
                del self.code[old]
        self.code[key] = code
        return code

    @staticmethod
    def load(path: str) -> t.Any:
        try:
            with open(path, "rb") as f:
                return marshal.load(f)
        except (OSError, EOFError, ValueError, TypeError):
            return None

    @staticmethod
    def store(path: str, code: t.Any) -> None:
        """Written whole (a reader never sees half a file); a failure only loses the copy."""
        part = f"{path}.{os.getpid()}.part"
        try:
            with open(part, "wb") as f:
                marshal.dump(code, f)
            os.replace(part, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(part)


def stable(value: t.Any) -> str:
    """A class or function by its qualified name, anything else by its repr."""
    if isinstance(value, type) or callable(value):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', repr(value))}"
    return repr(value)


def digest(key: tuple) -> str:
    """The file name of key's code: the same in every process of the run."""
    text = "\0".join(stable(part) for part in key)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def private_folder(parent: str, name: str = "template-cache") -> str | None:
    """parent/name, made 0700 and owned by this user (else None: no shared copies).
    The code read from there runs in Ansible's processes: nobody else may write it."""
    path = os.path.join(parent, name)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return path


def key(env: t.Any, source: str, bits: t.Any, *extra: t.Any) -> tuple:
    """Everything the compiled code of source depends on in env, at this moment."""
    context = bits._TemplateCompileContext.current(optional=True)
    return (
        type(env),
        env.code_generator_class,
        str(source),
        tuple(getattr(env, name) for name in LEXER_FIELDS),
        tuple(sorted(env.extensions)),
        env.optimized,
        env.autoescape,
        env.finalize,
        env.is_async,
        context.escape_backslashes if context is not None else None,
        bits._TemplateConfig.allow_embedded_templates,
        *extra,
    )


def install(environment: t.Any, bits: t.Any, cache: Cache) -> None:
    """Wrap environment's compile and compile_expression: code kept in cache."""
    if getattr(environment.compile, "template_cache", False):
        return
    from jinja2 import nodes
    from jinja2.environment import TemplateExpression
    from jinja2.exceptions import TemplateSyntaxError
    from jinja2.parser import Parser

    compile_ = environment.compile
    compile_expression = environment.compile_expression

    def compile_cached(self, source, name=None, filename=None, raw=False, defer_init=False):
        if raw or not isinstance(source, str) or self._debuggable_template_source:
            return compile_(self, source, name, filename, raw, defer_init)
        return cache.get(
            key(self, source, bits, "template", name, filename, defer_init),
            lambda: compile_(self, source, name, filename, raw, defer_init),
        )

    def expression_code(self, source: str) -> t.Any:
        """Jinja's Environment.compile_expression up to the compiled code."""
        parser = Parser(self, source, state="variable")
        try:
            expr = parser.parse_expression()
            if not parser.stream.eos:
                raise TemplateSyntaxError(
                    "chunk after expression", parser.stream.current.lineno, None, None
                )
            expr.set_environment(self)
        except TemplateSyntaxError:
            self.handle_exception(source=source)
        body = [nodes.Assign(nodes.Name("result", "store"), expr, lineno=1)]
        return compile_(self, nodes.Template(body, lineno=1))

    def expression_cached(self, source, undefined_to_none=True):
        if not isinstance(source, str) or self._debuggable_template_source:
            return compile_expression(self, source, undefined_to_none)
        code = cache.get(
            key(self, source, bits, "expression"), lambda: expression_code(self, source)
        )
        template = self.template_class.from_code(self, code, self.make_globals(None), None)
        return TemplateExpression(template, undefined_to_none)

    compile_cached.template_cache = True
    expression_cached.template_cache = True
    environment.compile = compile_cached
    environment.compile_expression = expression_cached


class Resolved:
    """Each filter and test name resolved once per process (Jinja2Loader.get_with_context).

    ansible-core 2.19 caches a name only per template environment, and resolving
    one that is not a legacy plugin (a collection's, or one of Jinja's own, which it
    looks for in ansible.builtin first) lists the collection's plugin files and
    imports each one's map. The answer depends on the name and on the loader's
    plugin folders only: it is kept until the loader's caches are cleared (a plugin
    folder added), a found plugin and a "no plugin" alike; an error is not kept."""

    def __init__(self) -> None:
        self.answers: dict[tuple[int, str], t.Any] = {}
        self.resolved = 0
        self.reused = 0

    def install(self, loader_class: t.Any) -> None:
        get_with_context = loader_class.get_with_context
        clear_caches = loader_class._clear_caches
        if getattr(get_with_context, "template_cache", False):
            return
        answers = self.answers

        def resolve_once(loader, name, *args, **kwargs):
            kwargs.pop("class_only", None)
            kwargs.pop("collection_list", None)
            if args or kwargs or not isinstance(name, str):
                return get_with_context(loader, name, *args, **kwargs)
            key = (id(loader), name)
            found = answers.get(key)
            if found is not None:
                self.reused += 1
                return found
            found = get_with_context(loader, name)
            self.resolved += 1
            answers[key] = found
            return found

        def clear_caches_too(loader, *args, **kwargs):
            for key in [k for k in answers if k[0] == id(loader)]:
                del answers[key]
            return clear_caches(loader, *args, **kwargs)

        resolve_once.template_cache = True
        loader_class.get_with_context = resolve_once
        loader_class._clear_caches = clear_caches_too


CACHE = Cache()
RESOLVED = Resolved()


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpulab.slurm_cluster.template_cache"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display: Display | None = None) -> None:
        super().__init__(display=display)
        self.active = False
        if os.environ.get("GPULAB_TEMPLATE_CACHE", "1") == "0":
            return
        import jinja2

        if not (
            ANSIBLE_VERSION.startswith(SUPPORTED) and jinja2.__version__.startswith(JINJA_SUPPORTED)
        ):
            self._display.vvv(
                f"gpulab.slurm_cluster.template_cache: ansible-core {ANSIBLE_VERSION} with "
                f"Jinja {jinja2.__version__} is not {SUPPORTED[0]}x with {JINJA_SUPPORTED[0]}x; "
                "templates are compiled as Ansible compiles them"
            )
            return
        from ansible import constants as C
        from ansible._internal._templating import _jinja_bits

        # Ansible's private folder for this run (made before any worker forks,
        # removed when the run ends): the workers' compiled code is shared there.
        with contextlib.suppress(OSError, TypeError):
            CACHE.folder = private_folder(C.DEFAULT_LOCAL_TMP)
        from ansible.plugins.loader import Jinja2Loader

        install(_jinja_bits.AnsibleEnvironment, _jinja_bits, CACHE)
        RESOLVED.install(Jinja2Loader)
        self.active = True

    def v2_playbook_on_stats(self, stats: t.Any) -> None:
        if self.active:
            self._display.vv(
                f"gpulab.slurm_cluster.template_cache: {CACHE.compiled} template strings "
                f"compiled in Ansible's own process, {CACHE.reused + CACHE.read} compilations "
                f"saved ({CACHE.read} read from the run's workers); {RESOLVED.resolved} filter "
                f"and test names resolved, {RESOLVED.reused} resolutions saved"
            )
