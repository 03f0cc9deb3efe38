# The study plan, the paper's tables, the claim checks and the self-contained HTML report, plus a
# short target per figure (`snakemake --cores 1 fig7a`).
rule study_plan:
    output:
        "results/plan.json",
    log:
        "results/logs/report/plan.log",
    params:
        plan=PLAN_DOCUMENT,
    run:
        write_plan(output[0], log[0], params.plan)


rule tables:
    input:
        runs=[run for tool in RUN_TOOLS for app in APP_KINDS for run in run_files(tool, app)],
        host="results/host.json",
        plan="results/plan.json",
    output:
        table1=report("results/tables/table1.csv", caption="../report/table1.rst", category="Tables"),
        table2=report("results/tables/table2.csv", caption="../report/table2.rst", category="Tables"),
    log:
        "results/logs/report/tables.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "python -m dlvirt tables --host {input.host:q} --plan {input.plan:q} --table1 {output.table1:q}"
        " --table2 {output.table2:q} {input.runs:q} > {log:q} 2>&1"


rule claims:
    input:
        summary="results/summary.csv",
        host="results/host.json",
        plan="results/plan.json",
        calibration=calibration_files(),
    output:
        report("results/claims.csv", caption="../report/claims.rst", category="Claims"),
    log:
        "results/logs/report/claims.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        margin=config["claims"]["equivalence_margin"],
        calibration=config["claims"]["calibration"] or "",
    shell:
        "python -m dlvirt claims --summary {input.summary:q} --host {input.host:q} --plan {input.plan:q}"
        " --margin {params.margin:q} --calibration={params.calibration:q} --output {output:q} > {log:q} 2>&1"


rule report:
    input:
        figures=figure_files(),
        summary="results/summary.csv",
        host="results/host.json",
        plan="results/plan.json",
        claims="results/claims.csv",
        table1="results/tables/table1.csv",
        table2="results/tables/table2.csv",
        runs=[run for tool in RUN_TOOLS for app in APP_KINDS for run in run_files(tool, app)],
        calibration=calibration_files(),
    output:
        report("results/report.html", caption="../report/report.rst", category="Report"),
    log:
        "results/logs/report/report.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        calibration=config["claims"]["calibration"] or "",
    shell:
        "python -m dlvirt report --summary {input.summary:q} --host {input.host:q} --plan {input.plan:q}"
        " --claims {input.claims:q} --table1 {input.table1:q} --table2 {input.table2:q}"
        " --calibration={params.calibration:q} --runs {input.runs:q} --output {output:q} {input.figures:q}"
        " > {log:q} 2>&1"


rule figures:
    input:
        figure_files(),
    localrule: True


# The tail-latency figures (extensions: LoadGen SingleStream and Server, those study.scenarios runs).
rule latency:
    input:
        [f"results/figures/{fig}.png" for fig in LATENCY_FIGURES],
    localrule: True


for _fig in FIGURES:

    rule:
        name:
            _fig
        input:
            f"results/figures/{_fig}.png",
            f"results/figures/{_fig}.pdf",
        localrule: True


# Last: a name like a target (lower case, no path) that no rule makes, i.e. a mistyped target, ends in
# one message naming the targets (the repository's own top-level files never match it).
rule unknown_target:
    input:
        no_such_target,
    output:
        "{target}",
    log:
        "results/logs/unknown_target/{target}.log",
    wildcard_constraints:
        target=r"[a-z][a-z0-9_]*",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    shell:
        "false"
