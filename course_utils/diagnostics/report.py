"""What diagnose() returns: one :class:`Finding` per probe, gathered in a :class:`Report`."""

from __future__ import annotations

from dataclasses import dataclass

from course_utils.checks import require_instance
from course_utils.language import _, translate
from course_utils.text_layout import display_width, fill, pad

PASS, FAIL, SKIP = "pass", "fail", "skip"
_MARKS = {PASS: "✓", FAIL: "✗", SKIP: "-"}


def probe_name(english: str) -> str:
    """Declare a probe's name (``CAUSAL_LEAK = probe_name("causal leak")``): the English text
    stays its key in code (``report["causal leak"]``), and the catalogue extracts it, so that
    :attr:`Finding.title` reads it in the learner's language.

    Used in lesson 08.
    """
    return require_instance("english", english, str, _("a str (the English text)"))


@dataclass(frozen=True)
class Finding:
    """The result of one probe: ``status`` is ``"pass"``, ``"fail"`` or ``"skip"``.

    Used in lesson 08.
    """

    probe: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == PASS

    @property
    def title(self) -> str:
        """The probe's name as the learner reads it, in the current language."""
        return translate(self.probe)


@dataclass(frozen=True, repr=False)
class Report:
    """All findings for one implementation; ``print(report)`` shows them one per line.

    Used in lesson 08.
    """

    subject: str
    findings: tuple[Finding, ...]

    @property
    def passed(self) -> bool:
        """True when no probe failed (skipped probes do not count against it)."""
        return not self.failures

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.status == FAIL)

    @property
    def skipped(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.status == SKIP)

    def __getitem__(self, probe: str) -> Finding:
        for finding in self.findings:
            if finding.probe == probe:
                return finding
        names = ", ".join(repr(f.probe) for f in self.findings)
        raise KeyError(f"no probe named {probe!r}; this report has {names}")

    def verdict(self) -> str:
        """One line: how many probes ran, how many failed, which were skipped."""
        ran = len(self.findings) - len(self.skipped)
        verdict = (_("all {ran} probes that ran passed").format(ran=ran)
                   if self.passed else
                   _(
                       "{n_failures} of {ran} probes that ran failed").format(
                       n_failures=len(self.failures), ran=ran))
        if self.skipped:
            verdict += _("; skipped: {probes}").format(
                probes=_(", ").join(f.title for f in self.skipped))
        return verdict

    def __str__(self) -> str:
        lines = [_("diagnose({subject}): {verdict}").format(subject=self.subject,
                                                             verdict=self.verdict())]
        width = max(display_width(f.title) for f in self.findings)
        for finding in self.findings:
            head = f"  {_MARKS[finding.status]} {pad(finding.title, width)}  "
            lines.append(fill(finding.message, head))
        return "\n".join(lines)

    __repr__ = __str__

    def show(self) -> None:
        print(self)
