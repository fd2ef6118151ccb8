package fixture

func  Ugly( ) int {return 1}
