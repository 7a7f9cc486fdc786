from fleetctl.entry import main

main()
