from oma_operator.main import main

main()
