# Per tool x app summaries (a figure needs only its own app's runs), then one summary.csv.
rule summarise_app:
    input:
        # this host's (or cluster's) runs, then the edge hosts' (known once their facts are)
        lambda w: run_files(w.tool, w.app) + site_run_files(w.tool, w.app),
    output:
        SUMMARY_FILE,
    log:
        "results/logs/summary/{tool}/{app}.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        mixed="--allow-mixed-code" if config["allow_mixed_code"] else "",
    shell:
        "python -m dlvirt aggregate {params.mixed} --output {output:q} {input:q} > {log:q} 2>&1"


rule summary:
    input:
        summary_files(),
    output:
        report("results/summary.csv", caption="../report/summary.rst", category="Summary"),
    log:
        "results/logs/summary/all.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "python -m dlvirt concat --output {output:q} {input:q} > {log:q} 2>&1"
