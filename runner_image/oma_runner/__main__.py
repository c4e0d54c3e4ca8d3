from oma_runner.entry import main

main()
