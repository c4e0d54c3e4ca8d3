from oma_runner.main import main

main()
