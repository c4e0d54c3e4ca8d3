from oma_operator.entry import main

main()
