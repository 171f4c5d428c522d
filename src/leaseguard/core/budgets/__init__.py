"""pg_cron statement budgets: declare them per environment, converge without silent reverts.

Each job of the claim / compute / publish pipeline runs from pg_cron as ONE command, rendered
from ONE template::

    set statement_timeout = '3s'; select "public"."claim_stats_projection_job_v1"();

The budget is part of the job's command, so a deploy that rewrites commands can silently
revert a deliberate production budget (publish = 6 s) to the code's default (3 s). The
modules, pure first (none opens a connection):

* `units`: budgets in milliseconds, parsed and spelt as statement_timeout reads them;
* `names`: function names, job names and schedules of a declaration;
* `command`: the one command template, and the parser that reads a live command back;
* `config`: the ``cron_budgets`` section and one environment's declaration;
* `live`: a row of cron.job as the planning reads it;
* `planning`: the decision per job, and the all-or-nothing policy;
* `leaseguard.adapters.budgets` (I/O, not here): read cron.job, plan and write, in one
  transaction.

Nothing is imported here, so importing one pure module never loads the I/O ones.
"""
