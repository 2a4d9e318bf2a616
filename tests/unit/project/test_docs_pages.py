"""The docs as a reader meets them: route pages and reference pages, each with its Sources list; links that
land; troubleshooting that starts from what kubectl shows; the migration traps; the Talos facts that
differ per release.

Every upstream fact named here was read at the source the page cites (its Sources list); these tests keep
the pages, the links between them and the facts the code also holds (labels, finding codes, GPU ids) in step.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from helpers.support import REPO

import driver_container
from driver_container.findings.gpus import TALOS_EXTENSIONS
from driver_container.formats.gpu_support import gpu_support
from driver_container.manager.labels import DRIVER_DEPLOY_LABEL, PRE_INSTALLED

DOCS = REPO / "docs"
PACKAGE = Path(driver_container.__file__).parent
# The operator route keeps the walk-through and its Talos settings; these moved to pages of their own.
REFERENCE_PAGES = ("upgrades.md", "manager.md", "mig.md", "mps.md", "imex.md", "dra.md", "migration.md")
SOURCED_PAGES = (
    "operator.md",
    "talos.md",
    "troubleshooting.md",
    "fabric.md",
    "publish.md",
    "image.md",
    "configuration.md",
    *REFERENCE_PAGES,
)
MOVED_SECTIONS = (
    "## MIG",
    "## MPS",
    "## IMEX",
    "## Upgrades",
    "## GPUCluster",
    "### Deliberate differences",
    "## What `driver-manager uninstall_driver` does",
    "## NVIDIA's DRA driver",
)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
# A commit cited in running text ("@ a22dbf67", "at 7a84d742"): such citations belong in the Sources list.
_INLINE_COMMIT = re.compile(r"(?:@ ?|\bat )[0-9a-f]{7,40}\b")


def _text(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _anchors(text: str) -> set[str]:
    """GitHub's heading ids: lower case, punctuation other than '-' and '_' dropped, spaces to '-'."""
    out: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.*)", line)):
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


def _split_sources(text: str) -> tuple[str, str]:
    """(the page before its final '## Sources' heading, the list after it)."""
    before, heading, sources = text.rpartition("\n## Sources\n")
    assert heading, "no '## Sources' section"
    return before, sources


def test_every_relative_link_and_anchor_in_the_docs_lands() -> None:
    pages = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
    assert {p.name for p in pages} >= set(SOURCED_PAGES)  # the split pages exist, so their links are checked
    broken = []
    for page in pages:
        for target in _LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            dest = page.parent / path if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif fragment and dest.suffix == ".md" and fragment not in _anchors(dest.read_text(encoding="utf-8")):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []


# `docs/<page>.md, "Heading"` or `docs/<page>.md ("Heading")` in a deploy file's comments.
_DEPLOY_REF = re.compile(r'docs/([\w.-]+\.md)(?:(?:,\s*|\s*\(\s*)"([^"]+)")?')


def _headings(text: str) -> set[str]:
    """Every heading's text outside fences, as a reader types it (backticks dropped, case ignored)."""
    out: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.*)", line)):
            out.add(m.group(1).replace("`", "").strip().lower())
    return out


def _deploy_comment_refs(text: str) -> list[tuple[str, str | None]]:
    """(page, heading or None) of every docs page a deploy file's comments name; an unquoted section name
    after the page (`docs/x.md, RBAC`) is returned as heading ``"?<name>"`` so it fails."""
    refs: list[tuple[str, str | None]] = []
    for line in text.splitlines():
        comment = line.partition("#")[2] if "#" in line else ""
        for m in _DEPLOY_REF.finditer(comment):
            heading = m.group(2)
            if heading is None and (bare := re.match(r",\s*([A-Z][\w -]*)[).;]", comment[m.end() :])):
                heading = "?" + bare.group(1)
            refs.append((m.group(1), heading))
    return refs


def test_the_deploy_checker_catches_a_wrong_page_heading_and_bare_name() -> None:
    text = '# a (docs/upgrades.md, "No such heading") b (docs/nosuch.md) c (docs/operator.md, RBAC).\n'
    assert _deploy_comment_refs(text) == [
        ("upgrades.md", "No such heading"),
        ("nosuch.md", None),
        ("operator.md", "?RBAC"),
    ]


def test_every_docs_page_and_heading_a_deploy_file_names_exists() -> None:
    broken = []
    for path in sorted((DOCS / "deploy").glob("*.yaml")):
        for page, heading in _deploy_comment_refs(path.read_text(encoding="utf-8")):
            dest = DOCS / page
            if not dest.is_file():
                broken.append(f"{path.name}: docs/{page} (no such page)")
            elif heading is not None and heading.replace("`", "").lower() not in _headings(_text(page)):
                broken.append(f"{path.name}: docs/{page}, {heading!r} (no such heading)")
    assert broken == []


def _reader_text() -> dict[str, str]:
    """Every page and deploy file a user reads, by name."""
    paths = [REPO / "README.md", *sorted(DOCS.glob("*.md")), *sorted((DOCS / "deploy").glob("*.yaml"))]
    return {str(p.relative_to(REPO)): p.read_text(encoding="utf-8") for p in paths}


def test_image_factory_installer_is_the_platform_installer_never_the_legacy_path() -> None:
    # siderolabs/image-factory internal/frontend/http/ui.go: from Talos 1.10 the factory names
    # <platform>-installer (metal-installer for bare metal); installer/ is the legacy path
    legacy = {name for name, text in _reader_text().items() if re.search(r"factory\.talos\.dev/installer", text)}
    assert legacy == set()
    assert "factory.talos.dev/metal-installer/" in _text("quickstart.md")


def test_no_page_says_the_nri_plugin_injects_the_gpu() -> None:
    # The device plugin answers with CDI device names (DEVICE_LIST_STRATEGY=cdi-annotations,cdi-cri) that
    # containerd resolves; the toolkit's NRI plugin serves the operator's operand pods only
    # (NVIDIA/gpu-operator controllers/object_controls.go setNRIPluginAnnotation, v26.7.0).
    said = {name for name, text in _reader_text().items() if re.search(r"NRI plugin injects", text, re.I)}
    assert said == set()
    assert "containerd resolves them from the CDI spec" in _text("quickstart.md")


def test_no_page_claims_a_talos_release_that_is_not_out() -> None:
    # Talos 1.14.0 exists only as release candidates (v1.14.0-rc.1); a final 1.14.0 is named nowhere.
    claims = {
        name: re.findall(r".{0,40}\b1\.14\.0\b(?!-).{0,20}", text)
        for name, text in _reader_text().items()
        if re.search(r"\b1\.14\.0\b(?!-)", text)
    }
    assert claims == {}


def test_the_glibc_extension_layout_is_the_one_it_ships() -> None:
    # siderolabs/extensions v1.13.9 misc/glibc/pkg.yaml: --prefix=/usr/local; no /usr/local/glibc anywhere.
    body, _ = _split_sources(_text("talos.md"))
    for line in [ln for ln in body.splitlines() if "/usr/local/glibc" in ln]:
        assert "no extension ships" in line, line
    assert "`/usr/local/lib`" in body and "/usr/local/sbin" in body


def test_the_manager_is_not_said_to_refuse_a_version_difference() -> None:
    manager = _text("manager.md")
    (row,) = [ln for ln in manager.splitlines() if ln.startswith("| `nvidia` loaded with a version other than")]
    assert row.rstrip().endswith("| 0 |"), row
    troubleshooting = _text("troubleshooting.md")
    assert "they must be identical` (`driver-manager`)" not in troubleshooting
    (symptom,) = [ln for ln in troubleshooting.splitlines() if ln.startswith("| Driver pod `Init:CrashLoopBackOff`")]
    assert "version differs from the image's userspace, or" not in symptom
    assert "A version difference" in symptom


def test_operator_route_keeps_the_route_and_links_every_reference_page() -> None:
    route = _text("operator.md")
    for heading in (
        "## 1. Prepare the Talos nodes",
        "## 3. Install gpu-operator",
        "## 4. Check the result",
        "## Settings on Talos",
    ):
        assert f"\n{heading}\n" in route
    assert [h for h in MOVED_SECTIONS if f"\n{h}" in route] == []
    assert [p for p in REFERENCE_PAGES if f"]({p}" not in route] == []
    for page in REFERENCE_PAGES:  # each reference page leads back to the route
        assert "](operator.md" in _text(page), page


@pytest.mark.parametrize("page", SOURCED_PAGES)
def test_page_ends_with_a_numbered_sources_list_that_its_text_cites(page: str) -> None:
    body, sources = _split_sources(_text(page))
    assert "\n## " not in sources, "Sources must be the last section"
    defined = [int(n) for n in re.findall(r"^(\d+)\. ", sources, re.M)]
    assert defined and defined == list(range(1, len(defined) + 1)), defined
    prose = re.sub(r"```.*?```", "", body, flags=re.S)
    cited = {int(n) for n in re.findall(r"\[(\d+)\](?!\()", prose)}
    assert cited <= set(defined), f"cited but not listed: {sorted(cited - set(defined))}"
    assert set(defined) <= cited, f"listed but never cited: {sorted(set(defined) - cited)}"
    assert _INLINE_COMMIT.findall(prose) == [], "a commit cited in the text instead of the Sources list"


def _finding_codes() -> set[str]:
    codes: set[str] = set()
    for module in sorted((PACKAGE / "findings").glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Finding":
                code = node.args[1] if len(node.args) > 1 else next(k.value for k in node.keywords if k.arg == "code")
                assert isinstance(code, ast.Constant)
                codes.add(str(code.value))
    return codes


def _symptom_rows() -> list[list[str]]:
    text = _text("troubleshooting.md")
    first = re.search(r"^## .*$", text, re.M)
    assert first and first.group(0) == "## Symptoms: what kubectl shows"  # the page opens with it
    section = text[first.end() : text.index("\n## ", first.end())]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| what")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows]


def test_troubleshooting_opens_with_what_kubectl_shows() -> None:
    rows = _symptom_rows()
    assert all(len(r) == 3 for r in rows)
    shown = " ".join(r[0] for r in rows)
    for symptom in (
        "Init:CrashLoopBackOff",
        "Init:0/1",
        "ImagePullBackOff",
        "manifest unknown",
        "read-only file system",
        "stat /sbin/ldconfig",
        f"{DRIVER_DEPLOY_LABEL}={PRE_INSTALLED}",
        "No devices were found",
        "NvidiaDriverRefused",
        "nvidia-driver-container/result=refused",
        "anti-affinity",
    ):
        assert symptom in shown, symptom
    known = _finding_codes()
    for what, _cause, fix in rows:
        named = set(re.findall(r"`([A-Z][A-Z0-9_]{3,})`", fix))
        assert named <= known | {"HostDriverPresentError", "KubernetesError"}, (what, named - known)
        assert named or "](" in fix, f"{what}: the fix names no finding and links no page"


def test_migration_page_gives_the_label_fix_and_the_orphan_fix_with_their_sources() -> None:
    text = _text("migration.md")
    # The command uses the label and value this project's driver-manager sets (manager/labels.py).
    assert f"kubectl get nodes -l {DRIVER_DEPLOY_LABEL}={PRE_INSTALLED}" in text
    assert f"kubectl label node <node> {DRIVER_DEPLOY_LABEL}=true --overwrite" in text
    _, sources = _split_sources(text)
    for fact in (
        "`controllers/state_manager.go` `addGPUStateLabels` @ v26.7.0",
        "`labelNodesWithOrphanedDriverPods` @ v26.7.0",
        "`reconcileNVIDIADriverUpgrades` @ v26.7.0",
        "DeletePropagationOrphan",
        "requiredDuringSchedulingIgnoredDuringExecution",
    ):
        assert fact in sources, fact
    for heading in ("From Talos's own route", "From a ClusterPolicy driver to NVIDIADriver", "Between Talos releases"):
        assert f"\n## {heading}" in text
    assert "](image.md" in text and "kubectl -n gpu-operator delete pod" in text


def test_talos_run_mount_flags_are_stated_per_release() -> None:
    # siderolabs/talos internal/pkg/mount/v3/helpers.go PseudoLate: v1.13.9 NOSUID|NOEXEC,
    # v1.14.0-rc.1 WithSecure() (NOSUID|NODEV) + WithNoExec().
    stated = 0
    for page in sorted(DOCS.glob("*.md")):
        for sentence in re.findall(r"Talos mounts `/run`.*?(?:\.\s|\n\n)", page.read_text(encoding="utf-8"), re.S):
            stated += 1
            flat = " ".join(sentence.split())
            assert "`nosuid,noexec` on 1.13" in flat and "`nosuid,nodev,noexec` from 1.14" in flat, page.name
    assert stated >= 2  # talos.md and publish.md


def test_fabric_manager_extensions_are_named_as_sidero_ships_them() -> None:
    # siderolabs/extensions nvidia-gpu/nvidia-fabricmanager/{production,lts}/pkg.yaml @ v1.13.9.
    wrong = re.compile(r"nvidia-fabricmanager(?:-\*`?|`?) extension")
    texts = {p.name: p.read_text(encoding="utf-8") for p in [REPO / "README.md", *DOCS.glob("*.md")]}
    texts |= {str(p.relative_to(PACKAGE)): p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py")}
    assert sorted(name for name, text in texts.items() if wrong.search(" ".join(text.split()))) == []
    fabric_fix = " ".join((PACKAGE / "findings" / "host.py").read_text(encoding="utf-8").split())
    assert "nvidia-fabricmanager-production or -lts" in fabric_fix.replace('" "', "")
    assert "`nvidia-fabricmanager-production` or `nvidia-fabricmanager-lts`" in " ".join(_text("fabric.md").split())


def test_gb10_page_states_the_disagreement_and_what_the_check_does() -> None:
    text = _text("talos.md")
    start = text.index("### GB10 (DGX Spark): the sources disagree")
    section = " ".join(text[start : text.index("\n## ", start)].split())
    gb10 = gpu_support(0x2E12)
    assert gb10 is not None and (gb10.open, gb10.proprietary) == ("yes", "no")  # what the section says it does
    assert "Sidero's Talos docs say proprietary" in section and "NVIDIA says open" in section
    assert "`FLAVOUR_CANNOT_DRIVE_GPU`" in section and f"`{TALOS_EXTENSIONS['open']}-production`" in section
    _, sources = _split_sources(text)
    assert "siderolabs/docs @ f89894a6" in sources and "NVIDIA/open-gpu-kernel-modules `README.md`" in sources
