"""The scenario suite of the memory lifecycle (issue 3, item 8), as data.

Each scenario has positive checks (what must be recalled) and negative ones (what must
not be): confirmed technical preferences are used for technical tasks; a preference
given for one presentation stays with that document and purpose; revoked, expired,
superseded, erased and unconfirmed memories never reach the result; a changed
preference is used from the next recall on; conflicting claims are held back and listed
as a conflict until the subject confirms one; a restatement reinforces the memory it
repeats instead of creating a duplicate; a purpose or scope mismatch returns nothing.

And the rules of the write boundary and of erasure (issue 13): a secret is refused and
never recalled; personal data raises a memory to its class, whose consent rule then
applies; a client's retry of a write changes nothing while a restatement in another turn
still reinforces; an earlier version whose replacement is erased awaits confirmation, and
an erasure with its history leaves no version to recall.
"""

from __future__ import annotations

from workers.scenarios.model import (
    TECH,
    Advance,
    Confirm,
    ConflictCheck,
    Erase,
    RecallCheck,
    Revoke,
    Scenario,
    Supersede,
    Sweep,
    Wait,
    Write,
)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="technical-preference-recalled",
        description="a confirmed technical preference is recalled for a technical task; another purpose's is not",
        steps=(
            Write(
                "python",
                "Prefers code samples in Python with type hints and a pytest test next to each one",
                key="code_language",
                confirmed=True,
            ),
            Write(
                "email-tone",
                "Likes a formal tone with a greeting and a signature in emails",
                purpose="email_writing",
                key="tone",
                confirmed=True,
            ),
            RecallCheck(
                "technical task, no task scope",
                "write a code sample for the retry helper",
                relevant=("python",),
                out_of_scope=("email-tone",),
            ),
            RecallCheck(
                "technical task in a document: the subject-wide preference applies",
                "document the retry helper with an example",
                scopes=("document:api-guide",),
                relevant=("python",),
                out_of_scope=("email-tone",),
            ),
        ),
    ),
    Scenario(
        name="one-presentation-preference",
        description="a preference given for one presentation is used for that document only, and only for its purpose",
        positive=False,
        steps=(
            Write(
                "concise",
                "Prefers concise technical explanations that show the code first",
                key="explanation_style",
                confirmed=True,
            ),
            Write(
                "deck",
                "For the Q3 board presentation only: large fonts, one idea per slide, no code on slides",
                scope="document:deck-q3",
                key="slide_style",
                confirmed=True,
            ),
            RecallCheck(
                "technical task for another document",
                "explain the new caching layer with code",
                scopes=("document:api-guide",),
                relevant=("concise",),
                out_of_scope=("deck",),
            ),
            RecallCheck(
                "technical task without a document",
                "how should slides and code be presented",
                relevant=("concise",),
                out_of_scope=("deck",),
            ),
            RecallCheck(
                "the presentation itself",
                "how should the slides of the board presentation look",
                scopes=("document:deck-q3",),
                relevant=("concise", "deck"),
            ),
            RecallCheck(
                "the same document, another purpose",
                "how should the slides of the board presentation look",
                purpose="marketing_copy",
                scopes=("document:deck-q3",),
                out_of_scope=("deck", "concise"),
                expect_empty=True,
            ),
        ),
    ),
    Scenario(
        name="document-override",
        description="a document's own answer for a key is used in that document; the subject-wide one elsewhere",
        steps=(
            Write("short", "Prefers short answers without preamble", key="answer_length", confirmed=True),
            Write(
                "notes",
                "In the Q3 board deck speaker notes, write long, detailed explanations",
                scope="document:deck-q3",
                key="answer_length",
                confirmed=True,
            ),
            RecallCheck(
                "a task in the document: its own answer is there",
                "how long should the answers be",
                scopes=("document:deck-q3",),
                relevant=("notes",),
            ),
            RecallCheck(
                "a task elsewhere: the subject-wide answer only",
                "how long should the answers be",
                scopes=("document:api-guide",),
                relevant=("short",),
                out_of_scope=("notes",),
            ),
        ),
    ),
    Scenario(
        name="revoked-consent",
        description="memories under a withdrawn consent (by reference or by purpose) are never returned",
        positive=False,
        steps=(
            Write(
                "fonts",
                "Is dyslexic and reads best with sans-serif fonts and short paragraphs",
                sensitivity="personal",
                basis="consent",
                consent_ref="consent-accessibility-1",
                key="readability",
                confirmed=True,
            ),
            Write("tables", "Prefers Markdown tables when comparing options", key="comparison_format", confirmed=True),
            Write(
                "signature",
                "Signs emails with first name only",
                purpose="email_writing",
                key="signature",
                confirmed=True,
            ),
            RecallCheck(
                "before the revocation",
                "format the comparison of the two databases for easy reading",
                relevant=("fonts", "tables"),
                out_of_scope=("signature",),
            ),
            Revoke(consent_ref="consent-accessibility-1"),
            RecallCheck(
                "after revoking the consent reference",
                "format the comparison of the two databases for easy reading",
                relevant=("tables",),
                stale=("fonts",),
            ),
            Revoke(purpose="email_writing"),
            RecallCheck(
                "after revoking the email purpose",
                "how should emails be signed",
                purpose="email_writing",
                stale=("signature",),
                expect_empty=True,
            ),
            RecallCheck(
                "the technical purpose is untouched",
                "format the comparison of the two databases for easy reading",
                relevant=("tables",),
                stale=("fonts",),
            ),
        ),
    ),
    Scenario(
        name="expired",
        description="a memory past its expires_at is not returned at that now, before the sweep and after it",
        positive=False,
        steps=(
            Write(
                "sprint",
                "During this sprint, prefers examples that target the staging cluster",
                kind="task_state",
                key="target_cluster",
                expires_in_s=600,
                confirmed=True,
            ),
            Write("yaml", "Prefers YAML over JSON for configuration examples", key="config_format", confirmed=True),
            RecallCheck(
                "while it is valid",
                "write a configuration example for the cluster deployment",
                relevant=("sprint", "yaml"),
            ),
            Advance(3600),
            RecallCheck(
                "an hour later, before any sweep (read-time expiry)",
                "write a configuration example for the cluster deployment",
                relevant=("yaml",),
                stale=("sprint",),
            ),
            Sweep(),
            RecallCheck(
                "after the sweep",
                "write a configuration example for the cluster deployment",
                relevant=("yaml",),
                stale=("sprint",),
            ),
        ),
    ),
    Scenario(
        name="after-expiry",
        description="after a memory expired (not yet swept), the same or a rival claim starts afresh",
        steps=(
            Write(
                "tabs",
                "Indents code with tabs",
                key="indentation",
                expires_in_s=1,
                confirmed=True,
            ),
            Write(
                "pg15",
                "The team's production database is PostgreSQL 15",
                kind="fact",
                key="production_database",
                veracity="imported",
                source_ref="doc:runbook-2025",
                expires_in_s=1,
            ),
            Wait(1.5),
            Write("tabs-again", "Indents code with tabs", key="indentation", confirmed=True, distinct_from="tabs"),
            Write(
                "pg17",
                "The team's production database is PostgreSQL 17",
                kind="fact",
                key="production_database",
                veracity="imported",
                source_ref="doc:architecture-2026",
            ),
            RecallCheck(
                "the statement made again after the first one expired is current",
                "how to indent code and which database runs in production",
                relevant=("tabs-again", "pg17"),
                stale=("tabs", "pg15"),
            ),
        ),
    ),
    Scenario(
        name="changed-preference",
        description="a changed preference (restated, then replaced explicitly) is used from the next recall on",
        steps=(
            Write("short", "Prefers short answers without preamble", key="answer_length", confirmed=True),
            RecallCheck("the first preference", "how long should the answer be", relevant=("short",)),
            RecallCheck(
                "asked again (may be served from the cache)", "how long should the answer be", relevant=("short",)
            ),
            Write(
                "detailed",
                "Now prefers detailed answers with complete code examples",
                key="answer_length",
                confirmed=True,
            ),
            RecallCheck(
                "the next recall after the subject changed it",
                "how long should the answer be",
                relevant=("detailed",),
                stale=("short",),
            ),
            Supersede(
                "detailed",
                Write(
                    "medium",
                    "Prefers medium-length answers: a summary first, then one code example",
                    key="answer_length",
                    confirmed=True,
                ),
            ),
            RecallCheck(
                "the next recall after an explicit replacement",
                "how long should the answer be",
                relevant=("medium",),
                stale=("short", "detailed"),
            ),
        ),
    ),
    Scenario(
        name="unconfirmed-inference",
        description="an inference is held back until confirmed; asked for, it comes marked needs_confirmation",
        positive=False,
        steps=(
            Write("go-reviews", "Reviews pull requests written in Go every day", kind="fact", confirmed=True),
            Write(
                "go-guess",
                "Probably wants code samples in Go",
                kind="inference",
                veracity="inferred",
                derived_from=("go-reviews",),
            ),
            RecallCheck(
                "default recall",
                "which language should code samples use",
                relevant=("go-reviews",),
                stale=("go-guess",),
            ),
            RecallCheck(
                "recall including unconfirmed memories",
                "which language should code samples use",
                include_unconfirmed=True,
                relevant=("go-reviews",),
                flagged=("go-guess",),
            ),
            Confirm("go-guess"),
            RecallCheck(
                "after the subject confirmed it",
                "which language should code samples use",
                relevant=("go-reviews", "go-guess"),
            ),
        ),
    ),
    Scenario(
        name="conflicting-documents",
        description="documents disagree: neither claim is current, the conflict is listed, a confirmation settles it",
        positive=False,
        steps=(
            Write(
                "pg15",
                "The team's production database is PostgreSQL 15",
                kind="fact",
                key="production_database",
                veracity="imported",
                source_ref="doc:runbook-2025",
            ),
            Write(
                "pg17",
                "The team's production database is PostgreSQL 17",
                kind="fact",
                key="production_database",
                veracity="imported",
                source_ref="doc:architecture-2026",
            ),
            Write("helm", "Deploys services with Helm charts on Kubernetes", kind="fact", confirmed=True),
            RecallCheck(
                "default recall: neither claim is current",
                "which PostgreSQL version runs in production",
                relevant=("helm",),
                stale=("pg15", "pg17"),
            ),
            RecallCheck(
                "recall including unconfirmed memories: both, marked",
                "which PostgreSQL version runs in production",
                include_unconfirmed=True,
                relevant=("helm",),
                flagged=("pg15", "pg17"),
            ),
            ConflictCheck("the conflict is listed", open=(("pg15", "pg17"),)),
            Confirm("pg17"),
            RecallCheck(
                "after the subject confirmed one claim",
                "which PostgreSQL version runs in production",
                relevant=("pg17", "helm"),
                stale=("pg15",),
            ),
            ConflictCheck("the conflict is resolved", closed=("pg15", "pg17")),
        ),
    ),
    Scenario(
        name="restatement",
        description="the same statement again reinforces the memory (confidence rises) instead of adding a duplicate",
        steps=(
            Write(
                "friendly",
                "Prefers a friendly, informal tone in documentation",
                key="doc_tone",
                veracity="imported",
                source_ref="import:style-survey",
            ),
            Write(
                "friendly-again",
                "prefers a friendly,  informal tone in documentation.",
                key="doc_tone",
                veracity="imported",
                source_ref="import:style-survey",
                same_as="friendly",
            ),
            RecallCheck(
                "one memory, more confident",
                "what tone should the documentation use",
                relevant=("friendly",),
                min_confidence=(("friendly", 0.6),),
            ),
        ),
    ),
    Scenario(
        name="summary-follows-its-sources",
        description="a summary is dropped with a superseded source and regenerated from the sources that remain",
        steps=(
            Write("kotlin", "Writes backend services in Kotlin", key="backend_language", confirmed=True),
            Write("gradle", "Builds every project with Gradle", key="build_tool", confirmed=True),
            Write(
                "digest",
                "Writes backend services in Kotlin. Builds every project with Gradle.",
                kind="summary",
                derived_from=("kotlin", "gradle"),
            ),
            RecallCheck(
                "the summary with its sources",
                "which language and build tool for the backend",
                relevant=("digest", "kotlin", "gradle"),
            ),
            Write("rust", "Now writes backend services in Rust", key="backend_language", confirmed=True),
            RecallCheck(
                "after a source changed: the regenerated summary, never the old one",
                "which language and build tool for the backend",
                relevant=("rust", "gradle", "digest'"),
                stale=("kotlin", "digest"),
            ),
        ),
    ),
    Scenario(
        name="erased",
        description="an erased memory, and what was derived from it, is never returned",
        positive=False,
        steps=(
            Write("laptop", "Works on a laptop with 8 GB of memory", kind="fact", key="hardware", confirmed=True),
            Write(
                "light",
                "Needs examples that run with little memory",
                kind="inference",
                veracity="inferred",
                derived_from=("laptop",),
                confirmed=True,
            ),
            Write("vim", "Edits code in Vim", kind="fact", key="editor", confirmed=True),
            RecallCheck(
                "before the erasure",
                "how much memory may the example use",
                relevant=("laptop", "light", "vim"),
            ),
            Erase(("laptop",)),
            RecallCheck(
                "after the erasure",
                "how much memory may the example use",
                relevant=("vim",),
                stale=("laptop", "light"),
            ),
        ),
    ),
    Scenario(
        name="purpose-mismatch",
        description="recall for a purpose the memories were not given for returns nothing",
        positive=False,
        steps=(
            Write("spaces", "Indents code with four spaces", key="indentation", confirmed=True),
            Write("types", "Wants type annotations on every public function", key="typing", confirmed=True),
            RecallCheck(
                "the purpose they were given for",
                "how should the code be formatted",
                relevant=("spaces", "types"),
            ),
            RecallCheck(
                "another purpose",
                "how should the code be formatted",
                purpose="customer_support",
                out_of_scope=("spaces", "types"),
                expect_empty=True,
            ),
        ),
    ),
    Scenario(
        name="secret-refused",
        description="a memory holding a credential is refused and nothing of it is ever recalled",
        positive=False,
        steps=(
            Write("stack", "Deploys the billing service with Terraform on AWS", key="deploy_tool", confirmed=True),
            Write(
                "aws-key",
                "The AWS access key for the deploy examples is AKIAIOSFODNN7EXAMPLE",
                key="deploy_credentials",
                refused="content",
            ),
            Write(
                "dsn",
                "Use postgres://deploy:Sup3rS3cretPw@db.internal:5432/billing in the examples",
                key="database_url",
                refused="content",
            ),
            RecallCheck(
                "the deploy examples: the tooling only, no credential",
                "which AWS access key and database should the deploy examples use",
                relevant=("stack",),
            ),
        ),
    ),
    Scenario(
        name="personal-data-raised",
        description="text holding an email address or phone number is kept as personal, under that class's rules",
        steps=(
            Write(
                "contact",
                "Send the review notes to alex.moreau@example.com, or call +44 20 7946 0958",
                key="review_contact",
                sensitivity="public",
                consent_ref="consent-contact-1",
                confirmed=True,
            ),
            Write(
                "no-consent",
                "Alex's personal number is +1 415 555 2671",
                key="phone",
                refused="provenance.consent_ref",
            ),
            RecallCheck(
                "the contact is recalled, as personal data",
                "where should the review notes go",
                relevant=("contact",),
                min_sensitivity=(("contact", "personal"),),
            ),
        ),
    ),
    Scenario(
        name="retried-write",
        description="a client's retry of a write changes nothing; the same statement in another turn reinforces it",
        steps=(
            Write(
                "tabs",
                "Indents code samples with four spaces, never tabs",
                key="indentation",
                veracity="tool",
                turn="turn-7",
            ),
            Write(
                "tabs-retry",
                "Indents code samples with four spaces, never tabs",
                key="indentation",
                veracity="tool",
                turn="turn-7",
                retry_of="tabs",
            ),
            Write(
                "tabs-retry-2",
                "Indents code samples with four spaces, never tabs",
                key="indentation",
                veracity="tool",
                turn="turn-7",
                retry_of="tabs",
            ),
            RecallCheck(
                "after two retries: the first confidence",
                "how should code samples be indented",
                relevant=("tabs",),
                max_confidence=(("tabs", 0.5),),
            ),
            Write(
                "tabs-again",
                "Indents code samples with four spaces, never tabs",
                key="indentation",
                veracity="tool",
                turn="turn-12",
                same_as="tabs",
            ),
            RecallCheck(
                "restated in another turn: reinforced",
                "how should code samples be indented",
                relevant=("tabs",),
                min_confidence=(("tabs", 0.5),),
            ),
        ),
    ),
    Scenario(
        name="erased-replacement",
        description="an earlier version whose replacement is erased awaits confirmation; --with-history leaves none",
        positive=False,
        steps=(
            Write("bullets", "Prefers release notes as bullet lists", key="release_notes", confirmed=True),
            Write("prose", "Now prefers release notes as short prose paragraphs", key="release_notes", confirmed=True),
            Erase(("prose",)),
            RecallCheck(
                "after erasing the replacement: the earlier version is not taken as current",
                "how should release notes be written",
                stale=("bullets", "prose"),
            ),
            RecallCheck(
                "it is there, awaiting confirmation, when unconfirmed memories are asked for",
                "how should release notes be written",
                include_unconfirmed=True,
                flagged=("bullets",),
                stale=("prose",),
            ),
            Confirm("bullets"),
            RecallCheck(
                "confirmed again: current",
                "how should release notes be written",
                relevant=("bullets",),
            ),
            Write("table", "Now prefers release notes as a table of changes", key="release_notes", confirmed=True),
            Erase(("table",), with_history=True),
            RecallCheck(
                "erased with its history: no version is left",
                "how should release notes be written",
                include_unconfirmed=True,
                stale=("bullets", "prose", "table"),
                expect_empty=True,
            ),
        ),
    ),
    Scenario(
        name="scope-mismatch",
        description="document and workspace memories are returned only for a task in that document or workspace",
        positive=False,
        steps=(
            Write(
                "doc-terms",
                "In the payments design document, call customers merchants",
                scope="document:payments-design",
                key="terminology",
                confirmed=True,
            ),
            Write(
                "ws-diagrams",
                "In the platform team workspace, draw architecture diagrams with Mermaid",
                scope="workspace:platform-team",
                key="diagrams",
                confirmed=True,
            ),
            RecallCheck(
                "no task scope",
                "which terms and diagrams to use",
                out_of_scope=("doc-terms", "ws-diagrams"),
                expect_empty=True,
            ),
            RecallCheck(
                "another document and another workspace",
                "which terms and diagrams to use",
                scopes=("document:onboarding-guide", "workspace:data-team"),
                out_of_scope=("doc-terms", "ws-diagrams"),
                expect_empty=True,
            ),
            RecallCheck(
                "the workspace itself",
                "which terms and diagrams to use",
                scopes=("workspace:platform-team",),
                relevant=("ws-diagrams",),
                out_of_scope=("doc-terms",),
            ),
            RecallCheck(
                "the document itself, in its workspace",
                "which terms and diagrams to use",
                scopes=("document:payments-design", "workspace:platform-team"),
                relevant=("doc-terms", "ws-diagrams"),
            ),
        ),
    ),
)

__all__ = ["SCENARIOS", "TECH"]
