from lightning_otel.collector.cli import main

main()
